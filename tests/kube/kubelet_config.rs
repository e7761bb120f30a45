//! The kubelet's own config as qosd's source of truth: five real-shaped
//! KubeletConfiguration files (fixtures/kubelet/) pass `qosd config check`,
//! `qosd config show` prints the kubelet's defaulted values, drop-ins merge
//! in lexical order, and a kubelet field set in both qosd's file and the
//! kubelet's is an error naming both files.

use crate::support::{qosd, write_file};
use serde_json::{json, Value};

const FIXTURES: [&str; 5] = [
    "docs-example.yaml",
    "kubeadm.yaml",
    "eks-kubelet-config.json",
    "kind.yaml",
    "tuned-node.yaml",
];

fn fixture(name: &str) -> String {
    format!("fixtures/kubelet/{name}")
}

fn show(args: &[&str]) -> Value {
    let mut a = vec!["config", "show", "-o", "json"];
    a.extend_from_slice(args);
    let (code, out, err) = qosd(&a);
    assert_eq!(code, 0, "qosd {a:?}: {err}\n{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn show_kubelet(name: &str) -> Value {
    show(&["--kubelet-config", &fixture(name)])
}

#[test]
fn all_five_real_kubelet_configs_pass_config_check() {
    for name in FIXTURES {
        let f = fixture(name);
        let (code, out, err) = qosd(&["config", "check", "--kubelet-config", &f]);
        assert_eq!(code, 0, "{name}: {err}\n{out}");
        assert!(out.contains("cgroupEnforcement: audit"), "{name}: {out}");
        // And the YAML output is the effective config, not the input.
        assert!(out.contains("evictionPressureTransitionPeriod:"), "{out}");
    }
}

#[test]
fn kubeadm_config_gets_the_kubelets_defaults() {
    let v = show_kubelet("kubeadm.yaml");
    // `evictionPressureTransitionPeriod: 0s` → 5m0s; `containerRuntimeEndpoint: ""` → the socket.
    assert_eq!(v["evictionPressureTransitionPeriod"], "5m0s");
    assert_eq!(
        v["containerRuntimeEndpoint"],
        "unix:///run/containerd/containerd.sock"
    );
    assert!(v.get("runtimeEndpoint").is_none(), "kubelet name only: {v}");
    // No evictionHard: the kubelet's five defaults.
    assert_eq!(
        v["evictionHard"],
        json!({
            "memory.available": "100Mi",
            "nodefs.available": "10%",
            "nodefs.inodesFree": "5%",
            "imagefs.available": "15%",
            "imagefs.inodesFree": "5%",
        })
    );
    assert_eq!(v["enforceNodeAllocatable"], json!(["pods"]));
    assert_eq!(v["podPidsLimit"], -1);
    assert_eq!(v["imageGCHighThresholdPercent"], 85);
    assert_eq!(v["imageGCLowThresholdPercent"], 80);
    assert_eq!(v["cgroupDriver"], "systemd");
    assert_eq!(v["cgroupRoot"], "/");
    assert_eq!(v["cpuManagerPolicy"], "none");
    assert_eq!(v["cpuCFSQuota"], true);
    assert_eq!(v["cpuCFSQuotaPeriod"], "100ms");
    assert_eq!(v["memoryThrottlingFactor"], 0.9);
    assert_eq!(v["mergeDefaultEvictionSettings"], false);
    assert_eq!(v["systemReserved"], json!({}));
    assert_eq!(v["cgroupEnforcement"], "audit");
    assert_eq!(v["kubeletConfig"], "fixtures/kubelet/kubeadm.yaml");
    // Fields qosd does not use are not in the document.
    assert!(v.get("authentication").is_none());
    assert!(v.get("staticPodPath").is_none());
}

#[test]
fn docs_eks_kind_and_tuned_configs_show_their_values() {
    let docs = show_kubelet("docs-example.yaml");
    assert_eq!(docs["evictionHard"]["imagefs.inodesFree"], "5%");
    assert_eq!(docs["evictionPressureTransitionPeriod"], "5m0s");
    assert_eq!(docs["cgroupDriver"], "cgroupfs");
    assert!(docs.get("address").is_none());

    let eks = show_kubelet("eks-kubelet-config.json");
    // A partial evictionHard is used as is (mergeDefaultEvictionSettings unset).
    assert_eq!(
        eks["evictionHard"],
        json!({"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"})
    );
    assert_eq!(
        eks["kubeReserved"],
        json!({"cpu": "70m", "ephemeral-storage": "1Gi", "memory": "442Mi"})
    );
    assert_eq!(eks["kubeReservedCgroup"], "/runtime");
    assert_eq!(eks["enforceNodeAllocatable"], json!(["pods"]));
    assert_eq!(eks["podPidsLimit"], -1);

    let kind = show_kubelet("kind.yaml");
    assert_eq!(kind["cgroupRoot"], "/kubelet");
    assert_eq!(kind["imageGCHighThresholdPercent"], 100);
    assert_eq!(kind["imageGCLowThresholdPercent"], 80);
    assert_eq!(
        kind["evictionHard"],
        json!({"imagefs.available": "0%", "nodefs.available": "0%", "nodefs.inodesFree": "0%"})
    );
    assert_eq!(kind["evictionPressureTransitionPeriod"], "5m0s");

    let tuned = show_kubelet("tuned-node.yaml");
    assert_eq!(tuned["podPidsLimit"], 4096);
    assert_eq!(tuned["evictionPressureTransitionPeriod"], "30s");
    assert_eq!(
        tuned["evictionSoftGracePeriod"]["memory.available"],
        "1m30s"
    );
    assert_eq!(tuned["evictionMaxPodGracePeriod"], 60);
    assert_eq!(tuned["memoryThrottlingFactor"], 0.8);
    assert_eq!(tuned["cpuManagerPolicy"], "static");
    assert_eq!(tuned["reservedSystemCPUs"], "0-1");
    assert_eq!(tuned["qosReserved"], json!({"memory": "50%"}));
    assert_eq!(
        tuned["enforceNodeAllocatable"],
        json!(["pods", "system-reserved", "kube-reserved"])
    );
    assert_eq!(tuned["systemReserved"]["memory"], "1Gi");
    assert_eq!(tuned["memoryQoS"], false);
}

#[test]
fn config_show_yaml_uses_kubelet_formats() {
    let (code, out, err) = qosd(&[
        "config",
        "show",
        "--kubelet-config",
        &fixture("kubeadm.yaml"),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("evictionPressureTransitionPeriod: 5m0s"),
        "{out}"
    );
    assert!(
        out.contains("containerRuntimeEndpoint: unix:///run/containerd/containerd.sock"),
        "{out}"
    );
    assert!(out.contains("memory.available: 100Mi"), "{out}");
}

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

#[test]
fn drop_ins_override_in_lexical_order() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("kubelet.conf.d");
    write_file(
        &dir,
        "20-root.conf",
        &format!("{HEAD}cgroupRoot: /second\nevictionHard:\n  memory.available: 300Mi\n"),
    );
    write_file(
        &dir,
        "10-root.conf",
        &format!("{HEAD}cgroupRoot: /first\nkubeReserved:\n  memory: 1Gi\n"),
    );
    write_file(&dir, "30-pids.conf", &format!("{HEAD}podPidsLimit: 2048\n"));
    // Not a drop-in (wrong extension): ignored, as by the kubelet.
    write_file(&dir, "40-ignored.yaml", &format!("{HEAD}cgroupRoot: /no\n"));
    let dir_s = dir.display().to_string();
    let v = show(&[
        "--kubelet-config",
        &fixture("kubeadm.yaml"),
        "--kubelet-config-dir",
        &dir_s,
    ]);
    assert_eq!(v["cgroupRoot"], "/second");
    assert_eq!(v["kubeReserved"], json!({"memory": "1Gi"}));
    assert_eq!(v["podPidsLimit"], 2048);
    // Merged key by key over the main file's defaulted thresholds.
    assert_eq!(v["evictionHard"]["memory.available"], "300Mi");
    assert_eq!(v["evictionHard"]["imagefs.available"], "15%");
    assert_eq!(v["kubeletConfigDir"], dir_s);
    // The main file's own values stay where no drop-in overrides them.
    assert_eq!(v["cgroupDriver"], "systemd");

    // Flags override both, like the kubelet's flags.
    let v = show(&[
        "--kubelet-config",
        &fixture("kubeadm.yaml"),
        "--kubelet-config-dir",
        &dir_s,
        "--cgroup-root",
        "/flag",
        "--cgroup-enforcement",
        "enforce",
    ]);
    assert_eq!(v["cgroupRoot"], "/flag");
    assert_eq!(v["cgroupEnforcement"], "enforce");
}

#[test]
fn a_kubelet_field_in_both_files_names_both() {
    let d = tempfile::tempdir().unwrap();
    let q = write_file(
        d.path(),
        "qosd.yaml",
        "reconcileInterval: 5s\nevictionHard:\n  memory.available: 1Gi\n",
    );
    let (code, out, err) = qosd(&[
        "config",
        "check",
        &q.display().to_string(),
        "--kubelet-config",
        &fixture("docs-example.yaml"),
    ]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("evictionHard"), "{err}");
    assert!(err.contains(&q.display().to_string()), "{err}");
    assert!(err.contains("fixtures/kubelet/docs-example.yaml"), "{err}");

    // The same through qosd's file naming the kubelet config (relative to
    // qosd's file), and a field the kubelet file leaves to its default.
    std::fs::copy(fixture("kind.yaml"), d.path().join("kubelet.yaml")).unwrap();
    let q2 = write_file(
        d.path(),
        "qosd2.yaml",
        "kubeletConfig: kubelet.yaml\npodPidsLimit: 100\n",
    );
    let (code, _out, err) = qosd(&["config", "check", &q2.display().to_string()]);
    assert_eq!(code, 2);
    assert!(err.contains("podPidsLimit"), "{err}");
    assert!(err.contains("qosd2.yaml"), "{err}");
    assert!(err.contains("kubelet.yaml"), "{err}");

    // qosd's own fields beside a kubelet config are fine.
    let q3 = write_file(
        d.path(),
        "qosd3.yaml",
        "kubeletConfig: kubelet.yaml\nreconcileInterval: 5s\ncgroupEnforcement: enforce\n",
    );
    let v = show(&["--config", &q3.display().to_string()]);
    assert_eq!(v["reconcileInterval"], "5s");
    assert_eq!(v["cgroupRoot"], "/kubelet");
    assert_eq!(v["cgroupEnforcement"], "enforce");
}

#[test]
fn bad_kubelet_values_name_the_kubelet_file() {
    let d = tempfile::tempdir().unwrap();
    let k = write_file(
        d.path(),
        "k.yaml",
        &format!("{HEAD}cgroupDriver: systemd-ish\nevictionHard:\n  memory.available: lots\n"),
    );
    let (code, _out, err) = qosd(&[
        "config",
        "check",
        "--kubelet-config",
        &k.display().to_string(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cgroupDriver (from kubelet config"), "{err}");
    assert!(err.contains("k.yaml"), "{err}");
    assert!(err.contains("\"systemd-ish\""), "{err}");
    assert!(err.contains("evictionHard[\"memory.available\"]"), "{err}");

    let wrong = write_file(
        d.path(),
        "w.yaml",
        "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
    );
    let (code, _out, err) = qosd(&[
        "config",
        "check",
        "--kubelet-config",
        &wrong.display().to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("w.yaml") && err.contains("v1alpha1"), "{err}");
}

#[test]
fn without_a_kubelet_config_cgroups_are_enforced() {
    let v = show(&[]);
    assert_eq!(v["cgroupEnforcement"], "enforce");
    assert!(v.get("kubeletConfig").is_none());
    assert_eq!(v["podPidsLimit"], -1);
}

#[test]
fn plan_takes_layout_and_reservations_from_the_kubelet_config() {
    let (code, out, err) = qosd(&[
        "plan",
        "--pods",
        "fixtures/pods",
        "--cgroup-version",
        "v2",
        "--node-cpu",
        "4",
        "--node-memory",
        "8Gi",
        "--hugepage-sizes",
        "none",
        "--kubelet-config",
        &fixture("tuned-node.yaml"),
        "--enforce-node-allocatable",
        "pods",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let files: Vec<&str> = v["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["file"].as_str().unwrap())
        .collect();
    // cgroupDriver systemd from the kubelet config: slice names.
    assert!(
        files.iter().any(|f| f.contains("/kubepods.slice/")),
        "{files:?}"
    );
    // podPidsLimit 4096 on every pod.
    assert!(v["writes"].as_array().unwrap().iter().any(|w| w["file"]
        .as_str()
        .unwrap()
        .ends_with("pids.max")
        && w["value"] == "4096"));
}

#[test]
fn config_check_needs_a_file_or_a_kubelet_config() {
    let (code, _out, err) = qosd(&["config", "check"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--kubelet-config"), "{err}");
}

const KUBELET_HEAD: &str =
    "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

/// `imageMinimumGCAge` from the kubelet's file is honoured (it was the
/// 2m0s default whatever the file said); `imageMaximumGCAge` is accepted,
/// validated like the kubelet and reported as not modelled.
#[test]
fn image_gc_ages_from_the_kubelet_config() {
    let d = tempfile::tempdir().unwrap();
    let k = write_file(
        d.path(),
        "kubelet.yaml",
        &format!("{KUBELET_HEAD}imageMinimumGCAge: 10m\nimageMaximumGCAge: 1h\n"),
    );
    let k = k.display().to_string();
    let v = show(&["--kubelet-config", &k]);
    assert_eq!(v["imageMinimumGCAge"], "10m0s");
    assert_eq!(v["imageMaximumGCAge"], "1h0m0s");
    let (code, out, err) = qosd(&["config", "check", "--kubelet-config", &k]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("imageMinimumGCAge: 10m0s"), "{out}");
    assert!(
        err.contains("imageMaximumGCAge is not modelled by qosd"),
        "{err}"
    );
    // The kubelet's own rule: a maximum age must exceed the minimum age.
    let bad = write_file(
        d.path(),
        "bad.yaml",
        &format!("{KUBELET_HEAD}imageMinimumGCAge: 10m\nimageMaximumGCAge: 5m\n"),
    );
    let (code, _, err) = qosd(&[
        "config",
        "check",
        "--kubelet-config",
        &bad.display().to_string(),
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("imageMaximumGCAge 5m0s must be greater than imageMinimumGCAge 10m0s"),
        "{err}"
    );
    // In qosd's own file too (no kubelet config).
    let q = write_file(d.path(), "qosd.yaml", "imageMaximumGCAge: 48h\n");
    let (code, _, err) = qosd(&["config", "check", &q.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("imageMaximumGCAge is not modelled"), "{err}");
}

/// Swap, memory-manager and topology-manager settings (once dropped at
/// debug level) are warnings in `config check` and `config show`, and
/// listed in `config show`'s `notModelledByQosd`.
#[test]
fn fields_qosd_does_not_model_are_never_silent() {
    let d = tempfile::tempdir().unwrap();
    let k = write_file(
        d.path(),
        "kubelet.yaml",
        &format!(
            "{KUBELET_HEAD}memorySwap: {{swapBehavior: LimitedSwap}}\nfailSwapOn: false\nmemoryManagerPolicy: Static\nreservedMemory:\n- numaNode: 0\n  limits: {{memory: 1Gi}}\ntopologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\nclusterDomain: cluster.local\n"
        ),
    );
    let k = k.display().to_string();
    let (code, _, err) = qosd(&["config", "check", "--kubelet-config", &k]);
    assert_eq!(code, 0, "{err}");
    for f in [
        "memorySwap",
        "failSwapOn",
        "memoryManagerPolicy",
        "reservedMemory",
        "topologyManagerPolicy",
        "topologyManagerScope",
    ] {
        assert!(
            err.lines()
                .any(|l| l.starts_with("qosd: warning: kubelet config")
                    && l.contains(&format!(" {f} is not modelled by qosd: "))),
            "{f}: {err}"
        );
    }
    assert!(err.contains("(outside its scope): clusterDomain"), "{err}");
    let (code, out, err2) = qosd(&["config", "show", "-o", "json", "--kubelet-config", &k]);
    assert_eq!(code, 0);
    assert_eq!(err2, err);
    let v: Value = serde_json::from_str(&out).unwrap();
    let listed: Vec<&str> = v["notModelledByQosd"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["field"].as_str().unwrap())
        .collect();
    assert!(
        listed.contains(&"memorySwap") && listed.contains(&"clusterDomain"),
        "{listed:?}"
    );
    // The real-shaped fixtures: kubeadm's zero values are at the default.
    let (code, _, err) = qosd(&[
        "config",
        "check",
        "--kubelet-config",
        &fixture("kubeadm.yaml"),
    ]);
    assert_eq!(code, 0);
    assert!(!err.contains("memorySwap is not modelled"), "{err}");
    assert!(err.contains("at the kubelet's default"), "{err}");
}

/// The kubelet parses threshold values as given (no trimming): a value
/// with whitespace in its config is refused, naming the kubelet file.
#[test]
fn threshold_values_with_whitespace_are_refused_like_the_kubelet() {
    let d = tempfile::tempdir().unwrap();
    for value in [" 100Mi", "100Mi ", " 10%"] {
        let k = write_file(
            d.path(),
            "kubelet.yaml",
            &format!("{KUBELET_HEAD}evictionHard:\n  memory.available: \"{value}\"\n"),
        );
        let (code, out, err) = qosd(&[
            "config",
            "check",
            "--kubelet-config",
            &k.display().to_string(),
        ]);
        assert_eq!(code, 2, "{value:?}: {out}");
        assert!(err.contains("evictionHard[\"memory.available\"]"), "{err}");
        assert!(err.contains("kubelet.yaml"), "{err}");
    }
    let k = write_file(
        d.path(),
        "kubelet.yaml",
        &format!("{KUBELET_HEAD}evictionHard:\n  memory.available: \"100Mi\"\n"),
    );
    let (code, _, err) = qosd(&[
        "config",
        "check",
        "--kubelet-config",
        &k.display().to_string(),
    ]);
    assert_eq!(code, 0, "{err}");
}
