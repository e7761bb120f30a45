//! The rendered DaemonSet pod on a kubeadm-like node: the default overlay
//! (`kubectl kustomize deploy/overlays/kubelet`) translated as the kubelet
//! would (devtools/src/daemonset_pod.rs) and run through the real
//! containerd (`SystemdCgroup = true`) of the systemd VM of tests/vm/
//! (systemd PID 1 on cgroup v2; docs/cgroup-v2-vm.md), by
//! tests/vm/daemonset_node.sh as a unit.
//!
//! The node is kubeadm-like: the kubelet's config file at
//! /var/lib/kubelet/config.yaml (systemd driver, reservations, eviction
//! thresholds: fixtures/kubelet/kubeadm-node.yaml); the kubelet's slices
//! with its values (kubepods.slice, kubepods-burstable.slice,
//! kubepods-besteffort.slice, two workload pods' slices and the qosd pod's
//! own); the runtime socket where the manifest mounts it. The pod runs with
//! the manifest's args, env (NODE_NAME), every mount at its path
//! (read-only where the manifest says), hostPID, the securityContext and the
//! resources (Guaranteed, in `kubepods-pod<uid>.slice`). It must become
//! ready on its readiness probe's path and port, report audit, the systemd
//! driver and dry-run evictions, write nothing and leave every value below
//! kubepods.slice as the kubelet set it.
//!
//! Deviations (no kubelet, no API server, no CNI in the VM): the pod uses
//! the node's network; no service account is mounted, so qosd works from
//! the runtime's data alone (`degraded: kubernetes-api`, still ready — the
//! documented behaviour without the API); the kubelet's slices are started
//! with `systemctl`, as the kubelet starts them over D-Bus.

#[path = "../../devtools/src/daemonset_pod.rs"]
mod daemonset_pod;
use crate::support;
use crate::vm;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use daemonset_pod::DaemonSetPod;
use serde::Deserialize;
use serde_json::{json, Value};
use vm::Results;

const SCRIPT: &str = include_str!("daemonset_node.sh");
const UID: &str = "d5e70000-0001-4000-8000-00000000d5e7";
const BURSTABLE_UID: &str = "d5e70000-0002-4000-8000-000000000002";
const BESTEFFORT_UID: &str = "d5e70000-0003-4000-8000-000000000003";

/// The default overlay rendered, every document as JSON.
fn rendered_default() -> Vec<Value> {
    let out = Command::new("kubectl")
        .args(["kustomize", "deploy/overlays/kubelet"])
        .current_dir(vm::repo())
        .output()
        .expect("run kubectl kustomize (kubectl is needed)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    yaml_serde::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn slice(qos: &str, uid: &str) -> String {
    format!("kubepods-{qos}pod{}.slice", uid.replace('-', "_"))
}

/// The kubelet's slices and values on this node (2 CPUs; kubelet formulas:
/// shares = milli·1024/1000, weight = 1 + (shares − 2)·9999/262142).
/// kubepods: allocatable CPU 2000m − 200m reserved → 1843 shares → 71;
/// memory.max = capacity − system- and kube-reserved (the script puts the
/// VM's capacity in `@ALLOCATABLE@`). Burstable: its one pod's 100m → 4;
/// BestEffort: 2 shares → 1. The qosd pod: 200m/128Mi Guaranteed. The
/// pod slices' hugetlb limits (0: no hugepage requests) the script writes
/// after, as the kubelet does where systemd has no property.
fn slices() -> String {
    [
        "kubepods.slice CPUWeight=71 MemoryMax=@ALLOCATABLE@ TasksMax=infinity".to_string(),
        "kubepods-burstable.slice CPUWeight=4".into(),
        "kubepods-besteffort.slice CPUWeight=1".into(),
        format!(
            "{} CPUWeight=4 MemoryMax=134217728",
            slice("burstable-", BURSTABLE_UID)
        ),
        format!("{} CPUWeight=1", slice("besteffort-", BESTEFFORT_UID)),
        format!(
            "{} CPUWeight=8 CPUQuota=20% MemoryMax=134217728",
            slice("", UID)
        ),
    ]
    .join("\n")
        + "\n"
}

/// Two workload pods (qosd-cri-pod's format) in their slices.
fn workloads() -> Value {
    let pod = |name: &str, uid: &str, qos: &str, shares: i64, mem: i64, adj: i64| {
        json!({
            "name": name, "namespace": "default", "uid": uid,
            "cgroup_parent": slice(qos, uid),
            "containers": [{"name": "main", "image": support::MEMHOG_IMAGE, "args": ["8"],
                "cpu_shares": shares, "memory_limit_in_bytes": mem, "oom_score_adj": adj}],
        })
    };
    json!([
        pod("web", BURSTABLE_UID, "burstable-", 102, 128 << 20, 900),
        pod("batch", BESTEFFORT_UID, "besteffort-", 2, 0, 1000),
    ])
}

/// qosd's image under the manifest's name, laid out like the Dockerfile's.
fn image(bin: &PathBuf, name: &str, out: &std::path::Path) {
    let st = Command::new("python3")
        .arg(vm::repo().join("tests/images/mkimage.py"))
        .args(["--at", "/usr/local/bin/qosd"])
        .arg(bin)
        .arg(name)
        .arg(out)
        .status()
        .expect("run mkimage.py");
    assert!(st.success(), "mkimage.py");
}

#[test]
#[ignore = "needs root: boots the systemd VM (qemu; debootstrap of a Debian rootfs on first run)"]
fn rendered_daemonset_pod_is_ready_and_audits_on_a_kubeadm_systemd_node() {
    let _vm = crate::vm::alone();
    let docs = rendered_default();
    let pod = DaemonSetPod::from_manifest(&docs).expect("the DaemonSet's pod");
    let bins = vm::static_bins(&["qosd", "qosd-cri-pod"]);
    let tmp = tempfile::tempdir().unwrap();
    let put = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        (p, format!("test/{name}"))
    };
    let qosd_tar = tmp.path().join("qosd.tar");
    image(&bins[0], &pod.image, &qosd_tar);
    let pod_name = format!("{}-vm1ab", pod.name);
    let node = json!({
        "pod_name": pod_name,
        "uid": UID,
        "image": pod.image,
        "cgroup_parent": slice("", UID),
        "config_root": format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~configmap"),
        "log_directory": format!("/var/log/pods/{}_{pod_name}_{UID}", pod.namespace),
    });
    let probes: String = pod
        .probes
        .iter()
        .map(|p| format!("{} {} {}\n", p.kind, p.path, p.port))
        .collect();
    let images = support::images();
    let files = vec![
        (
            vm::repo().join("fixtures/kubelet/kubeadm-node.yaml"),
            "test/kubelet.yaml".to_string(),
        ),
        put("pod.json", &serde_json::to_string(&pod).unwrap()),
        put("node.json", &node.to_string()),
        put("probes.txt", &probes),
        put("slices.txt", &slices()),
        put("pods.json", &workloads().to_string()),
        (qosd_tar, "test/qosd.tar".into()),
        (images.pause_tar.clone(), "test/pause.tar".into()),
        (images.memhog_tar.clone(), "test/memhog.tar".into()),
    ];
    let run = vm::run_systemd_script(SCRIPT, &bins[1..], &files, Duration::from_secs(1200), &[]);
    let ctx = || run.context();
    run.assert_done("DaemonSet pod on the systemd VM");
    let r = Results { text: &run.results };
    check_node(&r, &ctx);
    check_ready_and_auditing(&r, &ctx);
    check_container(&r, &pod, &ctx);
    check_values_unchanged(&r, &ctx);
}

fn check_node(r: &Results, ctx: &dyn Fn() -> String) {
    assert_eq!(r.value("PID1"), "systemd", "{}", ctx());
    assert_eq!(r.value("CGROUPFS"), "cgroup2fs");
    assert_eq!(r.value("CONTAINERD"), "active");
    let slices = r.all("SLICE");
    assert_eq!(slices.len(), 6, "{slices:?}");
    for l in slices {
        assert!(l.ends_with(" 0 active"), "slice not set up: {l}\n{}", ctx());
    }
    assert!(r.num("HUGETLB_ZERO") >= 3, "{}", ctx());
    assert_eq!(r.num("IMAGES"), 3, "{}", ctx());
    assert_eq!(r.num("PODS_RC"), 0, "{}", ctx());
    assert_eq!(r.all("WORKLOAD").len(), 2, "{}", ctx());
}

fn check_ready_and_auditing(r: &Results, ctx: &dyn Fn() -> String) {
    assert_eq!(r.num("DS_RC"), 0, "the pod did not start\n{}", ctx());
    assert_eq!(r.value("READYZ"), "200", "never ready\n{}", ctx());
    assert_eq!(r.value("HEALTHZ"), "200", "{}", ctx());
    assert_eq!(r.value("STARTUP"), "200", "{}", ctx());
    let st: Value = serde_json::from_str(r.value("STATUS"))
        .unwrap_or_else(|e| panic!("/status not JSON ({e})\n{}", ctx()));
    assert_eq!(st["ready"], true, "{st}");
    assert_eq!(st["mode"], "dry-run", "evictions not dry-run: {st}");
    assert_eq!(st["cgroup_enforcement"], "audit", "not auditing: {st}");
    assert_eq!(st["cgroup_driver"], "systemd", "the kubelet's driver: {st}");
    assert_eq!(st["cgroup_version"], "v2");
    // No API server here: ready, degraded, from the runtime's data.
    let degraded = st["degraded"].to_string();
    assert!(degraded.contains("kubernetes-api"), "{degraded}");
    // The workload pods and the qosd pod itself, seen through the socket.
    let count = |c: &str| st["pods"][c].as_u64().unwrap_or(0);
    assert!(
        count("guaranteed") + count("burstable") + count("best_effort") >= 3,
        "pods seen: {}",
        st["pods"]
    );
    let metric = |m: &str| -> f64 {
        let line = r
            .all("METRIC")
            .into_iter()
            .find(|l| l.starts_with(&format!("{m} ")))
            .unwrap_or_else(|| panic!("no {m}\n{}", ctx()));
        line[m.len()..]
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{m}: {line}"))
    };
    let rec: Vec<&str> = r.value("RECONCILES").split_whitespace().collect();
    let (first, last): (f64, f64) = (rec[0].parse().unwrap(), rec[1].parse().unwrap());
    assert!(last >= first + 3.0, "passes: {rec:?}\n{}", ctx());
    assert_eq!(metric("qosd_cgroup_writes_total"), 0.0, "{}", ctx());
    // The kubelet's values are what qosd plans from the kubelet's config:
    // nothing differs.
    assert_eq!(
        metric("qosd_cgroup_audit_drift"),
        0.0,
        "audit: {}\n{}",
        st["audit"],
        ctx()
    );
    assert_eq!(metric("qosd_ready"), 1.0);
    assert_eq!(r.num("LOG_EROFS"), 0, "{}", ctx());
}

fn check_container(r: &Results, pod: &DaemonSetPod, ctx: &dyn Fn() -> String) {
    assert_ne!(r.value("QOSD_PID"), "none", "{}", ctx());
    let cg = r.value("QOSD_CGROUP");
    assert!(
        cg.starts_with(&format!("/kubepods.slice/{}/", slice("", UID))),
        "the qosd pod is not in its Guaranteed pod slice: {cg}"
    );
    let args = r.value("QOSD_ARGS");
    assert_eq!(args, format!("/usr/local/bin/qosd {}", pod.args.join(" ")));
    assert_eq!(
        r.value("QOSD_ENV"),
        format!("NODE_NAME={}", r.value("HOSTNAME"))
    );
    let proc: BTreeMap<&str, &str> = r
        .all("QOSD_PROC")
        .into_iter()
        .filter_map(|l| l.split_once(' '))
        .collect();
    assert_eq!(proc["Uid"], "0", "runAsUser 0");
    assert_eq!(proc["NoNewPrivs"], "1", "allowPrivilegeEscalation: false");
    assert_eq!(proc["Seccomp"], "2", "RuntimeDefault: a filter");
    // capabilities: drop ALL, add KILL (bit 5).
    assert_eq!(proc["CapEff"], "0000000000000020", "{proc:?}");
    let mounts: BTreeMap<&str, &str> = r
        .all("MOUNT")
        .into_iter()
        .filter_map(|l| l.split_once(' '))
        .collect();
    let ro = |opts: &str| opts.split(',').any(|o| o == "ro");
    assert!(
        ro(mounts["/"]),
        "readOnlyRootFilesystem: / is {}",
        mounts["/"]
    );
    for m in &pod.mounts {
        let opts = mounts
            .get(m.container_path.as_str())
            .unwrap_or_else(|| panic!("{} not mounted\n{}", m.container_path, ctx()));
        assert_eq!(
            ro(opts),
            m.read_only,
            "{} ({}): {opts}",
            m.container_path,
            m.volume
        );
    }
}

/// Every value file below kubepods.slice before the pod: the same after
/// (cgroups made meanwhile — the qosd pod's container — are not compared).
fn check_values_unchanged(r: &Results, ctx: &dyn Fn() -> String) {
    let parse = |tag: &str| -> BTreeMap<String, String> {
        r.all(tag)
            .into_iter()
            .map(|l| {
                let mut w = l.splitn(3, ' ');
                let (p, f) = (w.next().unwrap(), w.next().unwrap_or(""));
                (format!("{p}/{f}"), w.next().unwrap_or("").to_string())
            })
            .collect()
    };
    let before = parse("BEFORE");
    let after = parse("AFTER");
    assert!(
        before.contains_key("kubepods.slice/cpu.weight"),
        "no kubepods.slice values\n{}",
        ctx()
    );
    assert_eq!(before["kubepods.slice/cpu.weight"], "71");
    assert!(before.len() >= 20, "too few values: {before:?}");
    for (k, v) in &before {
        assert_eq!(after.get(k), Some(v), "{k} changed\n{}", ctx());
    }
}
