//! In-place pod resize. A manifest with the kubelet's status (`kubectl get
//! pod -o json`) is planned with the resources the kubelet admitted. With
//! real parts: the real containerd runs the pods
//! (tests/support), the API side is the fake API server
//! (tests/support/kubeapi.rs) serving the pods in `kubectl get pod -o json`
//! shape with the status fields a kubelet writes.
//!
//! * A pod resized through the runtime (`UpdateContainerResources`, as the
//!   kubelet actuates a resize) gets the new values planned
//!   (`qosd plan --cri`, runtime alone) and listed (`qosd pods`).
//! * A pod resized through the API, step by step — pending (Deferred),
//!   infeasible, in progress, done — gets the kubelet's values at each step
//!   from `qosd plan --cri` and from `qosd run --dry-run` (what it would
//!   write), and `qosd pods -o json` / `-o wide` show the resize state and
//!   the desired values.
//!
//! Needs root (containerd, cgroups).

use std::collections::HashMap;
use std::time::Duration;

use crate::support::kubeapi::{fixture_pod, FakeApi};
use crate::support::*;
use serde_json::{json, Value};

const NODE: &str = "qosd-test-node";

/// `qosd plan --cri -o json` with `extra` flags: the writes, file → value.
fn plan(env: &Containerd, extra: &[&str]) -> HashMap<String, String> {
    let mut args = vec!["plan", "--cri", "--output", "json"];
    args.extend(env.qosd_flags());
    args.extend(["--node-cpu", "8", "--node-memory", "32Gi"]);
    args.extend_from_slice(extra);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "qosd plan: {err}");
    check_contract("plan", &out);
    let doc: Value = serde_json::from_str(&out).unwrap();
    doc["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["file"].as_str().unwrap().to_string(),
                w["value"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The pod cgroup's (cpu.shares, cpu.cfs_quota_us, memory.limit_in_bytes)
/// in a plan; "-" when not written.
fn pod_values(
    env: &Containerd,
    pod: &RunningPod,
    writes: &HashMap<String, String>,
) -> (String, String, String) {
    let get = |ctrl: &str, f: &str| {
        let file = env.cgroup_dir(ctrl, pod).join(f);
        writes
            .get(file.to_str().unwrap())
            .cloned()
            .unwrap_or_else(|| "-".into())
    };
    (
        get("cpu", "cpu.shares"),
        get("cpu", "cpu.cfs_quota_us"),
        get("memory", "memory.limit_in_bytes"),
    )
}

fn vals(s: i64, q: i64, m: i64) -> (String, String, String) {
    (s.to_string(), q.to_string(), m.to_string())
}

/// `kubectl get pod -o json` of a Guaranteed pod whose resize from 1 CPU /
/// 1Gi to 2 / 2Gi the kubelet refused (static CPU manager): `qosd plan`
/// plans what the kubelet keeps, per kubelet version, and says why.
#[test]
fn a_manifest_with_a_refused_resize_plans_what_the_kubelet_keeps() {
    for version in ["1.33", "1.36"] {
        let (code, out, err) = qosd(&[
            "plan",
            "--pods",
            "fixtures/kube/resize-infeasible.json",
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            "/",
            "--node-cpu",
            "8",
            "--node-memory",
            "32Gi",
            "--kubelet-version",
            version,
            "--output",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        check_contract("plan", &out);
        let doc: Value = serde_json::from_str(&out).unwrap();
        let pod = "/kubepods/pod3f6a9c2e-8d41-4b7a-9e05-1c2d3e4f5a61";
        let value = |ctrl: &str, f: &str| {
            doc["writes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["file"] == json!(format!("/sys/fs/cgroup/{ctrl}{pod}/{f}")))
                .map(|w| w["value"].as_str().unwrap().to_string())
        };
        assert_eq!(value("cpu", "cpu.shares").as_deref(), Some("1024"), "{out}");
        assert_eq!(value("cpu", "cpu.cfs_quota_us").as_deref(), Some("100000"));
        assert_eq!(
            value("memory", "memory.limit_in_bytes").as_deref(),
            Some("1073741824")
        );
        assert!(
            err.contains("pod shop/db-0: in-place resize pending (Infeasible): Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\"; requests and limits are the ones the kubelet admitted, not the spec's"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn a_resize_through_the_runtime_is_planned() {
    require_containerd();
    let env = Containerd::start();
    let spec = PodSpec::new("resized").container(
        ContainerSpec::pause("app")
            .cpu(Some(100), Some(400))
            .memory(Some(32 * MI), Some(128 * MI)),
    );
    let pod = env.run_pod(&spec).await;
    let before = pod_values(&env, &pod, &plan(&env, &[]));
    assert_eq!(
        before,
        vals(kubelet::shares(100), kubelet::quota(400), 128 * MI)
    );

    // The kubelet actuates a resize: cpu 300m/800m, memory limit 256Mi.
    let resized = ContainerSpec::pause("app")
        .cpu(Some(300), Some(800))
        .memory(Some(32 * MI), Some(256 * MI));
    let res = resized.linux_resources(spec.class(), kubelet::memory_capacity());
    env.client()
        .await
        .update_container_resources(&pod.containers[0].1, res)
        .await
        .unwrap();
    let status = env.container_status(&pod.containers[0].1).await;
    let linux = status.resources.and_then(|r| r.linux).expect("resources");
    assert_eq!(
        linux.cpu_shares,
        kubelet::shares(300),
        "the runtime runs it"
    );

    let after = pod_values(&env, &pod, &plan(&env, &[]));
    assert_eq!(
        after,
        vals(kubelet::shares(300), kubelet::quota(800), 256 * MI)
    );
    // `qosd pods` lists what the runtime runs.
    let (code, out, err) = qosd(&[
        "pods",
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let p = doc["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["uid"] == json!(spec.uid))
        .unwrap();
    assert_eq!(p["containers"][0]["cpu_shares"], kubelet::shares(300));
    assert_eq!(p["containers"][0]["cpu_quota"], kubelet::quota(800));
    assert_eq!(
        p["containers"][0]["limits"]["memory"],
        (256 * MI).to_string()
    );
    assert!(
        p["resize"].is_null(),
        "the runtime alone knows of no resize"
    );
}

/// One container's resources in the API's shape.
fn resources(cpu_req: &str, cpu_lim: &str, mem_req: &str, mem_lim: &str) -> Value {
    json!({
        "requests": {"cpu": cpu_req, "memory": mem_req},
        "limits": {"cpu": cpu_lim, "memory": mem_lim},
    })
}

/// Where a resize stands in the API pod.
struct Step {
    name: &'static str,
    /// spec resources (desired)
    spec: Value,
    /// status.containerStatuses[0].allocatedResources
    allocated: Value,
    /// status.containerStatuses[0].resources (what the runtime runs)
    actual: Value,
    /// The resize conditions.
    conditions: Value,
    generation: i64,
    /// The pod cgroup's (shares, quota, memory limit) the kubelet keeps.
    want: (String, String, String),
    /// `qosd pods -o json`'s resize state.
    state: Option<&'static str>,
}

fn api_pod(p: &RunningPod, step: &Step) -> Value {
    let mut v = fixture_pod(
        "web-burstable.json",
        &p.spec.uid,
        &p.spec.name,
        &p.spec.namespace,
        NODE,
    );
    v["metadata"]["generation"] = json!(step.generation);
    v["spec"]["containers"][0]["name"] = json!("app");
    v["spec"]["containers"][0]["resources"] = step.spec.clone();
    v["status"]["observedGeneration"] = json!(step.generation);
    let mut conditions = v["status"]["conditions"].as_array().unwrap().clone();
    conditions.extend(step.conditions.as_array().unwrap().iter().cloned());
    v["status"]["conditions"] = json!(conditions);
    let cs = &mut v["status"]["containerStatuses"][0];
    cs["name"] = json!("app");
    cs["allocatedResources"] = step.allocated.clone();
    cs["resources"] = step.actual.clone();
    v
}

/// The steps of a resize from 100m/400m cpu and 128Mi memory limit to
/// 300m/800m and 256Mi: running, pending (Deferred), a second resize to 100
/// CPUs refused as infeasible, the first admitted (in progress), done.
fn steps() -> [Step; 5] {
    let original = resources("100m", "400m", "32Mi", "128Mi");
    let bigger = resources("300m", "800m", "32Mi", "256Mi");
    let huge = resources("100", "100", "32Mi", "128Mi");
    let pending = |reason: &str, message: &str| {
        json!([{"type": "PodResizePending", "status": "True", "reason": reason,
                "message": message, "observedGeneration": 2,
                "lastTransitionTime": "2026-11-27T10:00:00Z"}])
    };
    let old = vals(kubelet::shares(100), kubelet::quota(400), 128 * MI);
    let new = vals(kubelet::shares(300), kubelet::quota(800), 256 * MI);
    let step =
        |name, spec: &Value, allocated: &Value, actual: &Value, conditions, generation| Step {
            name,
            spec: spec.clone(),
            allocated: allocated["requests"].clone(),
            actual: actual.clone(),
            conditions,
            generation,
            want: old.clone(),
            state: None,
        };
    let in_progress = json!([{"type": "PodResizeInProgress", "status": "True",
                              "observedGeneration": 4}]);
    [
        step("running", &original, &original, &original, json!([]), 1),
        Step {
            state: Some("Deferred"),
            ..step(
                "pending (Deferred)",
                &bigger,
                &original,
                &original,
                pending(
                    "Deferred",
                    "Node didn't have enough resource: cpu, requested: 300, used: 7900, capacity: 8000",
                ),
                2,
            )
        },
        Step {
            state: Some("Infeasible"),
            ..step(
                "infeasible",
                &huge,
                &original,
                &original,
                pending(
                    "Infeasible",
                    "Node didn't have enough capacity: cpu, requested: 100000, capacity: 8000",
                ),
                3,
            )
        },
        Step {
            state: Some("InProgress"),
            want: new.clone(),
            ..step("in progress", &bigger, &bigger, &original, in_progress, 4)
        },
        Step {
            want: new.clone(),
            ..step("done", &bigger, &bigger, &bigger, json!([]), 4)
        },
    ]
}

/// The value of the last "would write" a dry-run daemon logged for `file`.
fn last_would_write(daemon: &Daemon, file: &std::path::Path) -> Option<String> {
    let needle = format!("file={}", file.display());
    daemon
        .log()
        .lines()
        .rev()
        .filter(|l| l.contains("would write cgroup value") && l.contains(&needle))
        .find_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("value="))
                .map(str::to_string)
        })
}

/// `qosd pods` with the API: the pod's entry (`-o json`) or the listing.
fn pods(env: &Containerd, kubeconfig: &std::path::Path, output: &str) -> String {
    let (code, out, err) = qosd(&[
        "pods",
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        output,
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
    ]);
    assert_eq!(code, 0, "{err}");
    if output == "json" {
        check_contract("pods", &out);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn a_resize_through_the_api_gets_the_kubelets_values_at_each_step() {
    require_containerd();
    let env = Containerd::start();
    let spec = PodSpec::new("api-resized").container(
        ContainerSpec::pause("app")
            .cpu(Some(100), Some(400))
            .memory(Some(32 * MI), Some(128 * MI)),
    );
    let pod = env.run_pod(&spec).await;
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(d.path());
    let kube = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
    ];
    let steps = steps();

    // The daemon, dry run, beside: it logs each value it would write.
    let mut run = env.run_args(None);
    run.extend(["--dry-run", "--node-cpu", "8", "--node-memory", "32Gi"]);
    run.extend(kube);
    api.put_pod(api_pod(&pod, &steps[0]));
    let daemon = Daemon::start(&run);
    let shares_file = env.cgroup_dir("cpu", &pod).join("cpu.shares");
    let quota_file = env.cgroup_dir("cpu", &pod).join("cpu.cfs_quota_us");

    for step in &steps {
        api.put_pod(api_pod(&pod, step));
        let got = pod_values(&env, &pod, &plan(&env, &kube));
        assert_eq!(got, step.want, "qosd plan at step {}", step.name);
        // `qosd run --dry-run` follows the API: its last "would write" of
        // the pod's shares and quota are the kubelet's values.
        wait_for(
            &format!("run --dry-run at step {}", step.name),
            Duration::from_secs(30),
            || {
                last_would_write(&daemon, &shares_file).as_deref() == Some(step.want.0.as_str())
                    && last_would_write(&daemon, &quota_file).as_deref()
                        == Some(step.want.1.as_str())
            },
        );
        let doc: Value = serde_json::from_str(&pods(&env, &kubeconfig, "json")).unwrap();
        let p = doc["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["uid"] == json!(spec.uid))
            .unwrap();
        assert_eq!(
            p["resize"]["state"].as_str(),
            step.state,
            "qosd pods at step {}: {p}",
            step.name
        );
        if step.state.is_some_and(|s| s != "InProgress") {
            assert_eq!(
                p["resize"]["desired"]["app"]["limits"]["cpu"], step.spec["limits"]["cpu"],
                "{}",
                step.name
            );
        }
    }
    // The wide listing: the resize state, admitted vs desired.
    api.put_pod(api_pod(&pod, &steps[2]));
    let text = pods(&env, &kubeconfig, "wide");
    let row = text
        .lines()
        .find(|l| l.starts_with("qosd-test/api-resized ") && l.contains("cpu=100m"))
        .unwrap_or_else(|| panic!("no resources row: {text}"));
    assert!(row.contains("cpu=100,memory=32Mi"), "{row}");
    assert!(text.contains("Infeasible"), "{text}");
    assert!(
        text.contains("in-place resize pending (Infeasible): Node didn't have enough capacity"),
        "{text}"
    );
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
    drop(daemon);
}
