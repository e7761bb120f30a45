//! Local-storage limits beside a kubelet: the limits come from the API
//! server's pods (the fake one, tests/support/kubeapi.rs) — a container's
//! `ephemeral-storage` limit and an emptyDir `sizeLimit` in `spec.volumes`,
//! which the container runtime does not know — and the pods run in the real
//! containerd. `qosd run --eviction-backend api` evicts both pods over their
//! limits in the same pass, each with the kubelet's 1 s grace, and leaves
//! the pod within its limit. Needs root (containerd, cgroups).

use std::ffi::OsStr;
use std::time::Duration;

use crate::support::kubeapi::{fixture_pod, FakeApi};
use crate::support::*;
use serde_json::{json, Value};

const NODE: &str = "qosd-test-node";

/// The API's pod: one container `app` with an `ephemeral-storage` limit,
/// and `volumes`.
fn api_pod(p: &RunningPod, limit: &str, volumes: Value) -> Value {
    let mut v = fixture_pod(
        "web-burstable.json",
        &p.spec.uid,
        &p.spec.name,
        &p.spec.namespace,
        NODE,
    );
    v["spec"]["containers"][0]["name"] = json!("app");
    v["spec"]["containers"][0]["resources"] = json!({
        "requests": {"ephemeral-storage": "1Mi"},
        "limits": {"ephemeral-storage": limit},
    });
    v["spec"]["volumes"] = volumes;
    v["status"]["qosClass"] = json!("BestEffort");
    v["status"]["containerStatuses"][0]["name"] = json!("app");
    v
}

/// Write `mib` MiB into the container's writable layer.
async fn fill_layer(env: &Containerd, p: &RunningPod, mib: usize) {
    let pid = env.container_pid(&p.containers[0].1).await;
    std::fs::write(
        format!("/proc/{pid}/root/fill"),
        vec![0x5au8; mib * MI as usize],
    )
    .unwrap();
}

/// The writable layer the runtime reports for the pod's container.
async fn layer_bytes(env: &Containerd, p: &RunningPod) -> u64 {
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn limits_from_the_api_evict_every_pod_over_one_in_the_same_pass() {
    require_containerd();
    let env = Containerd::start();
    let spec = |name: &str| PodSpec::new(name).container(ContainerSpec::memhog("app", &["2"]));
    let layer = env.run_pod(&spec("layer")).await;
    let scratch = env.run_pod(&spec("scratch")).await;
    let calm = env.run_pod(&spec("calm")).await;
    fill_layer(&env, &layer, 12).await;
    fill_layer(&env, &calm, 2).await;
    // The kubelet's emptyDir directory under --root-dir: 3 MiB, limit 1Mi.
    let dir = env.dir().join(format!(
        "pods/{}/volumes/kubernetes.io~empty-dir/scratch",
        scratch.spec.uid
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("data"), vec![0x5au8; 3 * MI as usize]).unwrap();

    let api = FakeApi::start();
    api.put_pod(api_pod(&layer, "8Mi", json!([])));
    api.put_pod(api_pod(&calm, "8Mi", json!([])));
    api.put_pod(api_pod(
        &scratch,
        "64Mi",
        json!([{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}},
               {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "1Ki"}}]),
    ));
    // containerd refreshes writable-layer usage every few seconds: start
    // once it reports the filled layer, so one pass sees both pods over.
    let t = std::time::Instant::now();
    while layer_bytes(&env, &layer).await < 12 * MI as u64 {
        assert!(t.elapsed() < Duration::from_secs(60), "no layer usage");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let d = tempfile::tempdir().unwrap();
    let kubeconfig = api.kubeconfig(d.path());
    let mut args = env.run_args(None);
    args.extend([
        "--eviction-backend",
        "api",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
    ]);
    let daemon = Daemon::start_with(
        &args,
        &[("QOSD_LOG", OsStr::new("info,qosd::eviction::timing=debug"))],
    );
    wait_for("both evictions", Duration::from_secs(60), || {
        api.evictions().len() >= 2
    });
    let mut evicted: Vec<(String, Value)> = api
        .evictions()
        .into_iter()
        .map(|(_, name, body, code)| {
            assert_eq!(code, 201);
            (name, body)
        })
        .collect();
    evicted.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = evicted.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["layer", "scratch"]);
    for (name, body) in &evicted {
        assert_eq!(
            body["deleteOptions"]["gracePeriodSeconds"], 1,
            "{name}: the kubelet's grace for local storage"
        );
    }
    // One pass evicted both (the pass timing line counts its evictions).
    wait_for("the pass's timing line", Duration::from_secs(10), || {
        daemon
            .log()
            .lines()
            .any(|l| l.contains("eviction pass timing") && l.contains("evicted=2"))
    });
    let log = daemon.log();
    assert!(log.contains("Usage of EmptyDir volume"), "{log}");
    assert!(
        log.contains("Pod ephemeral local storage usage exceeds the total limit of containers 8Mi"),
        "{log}"
    );
    // Later passes leave the pod within its limit alone.
    let passes = || {
        daemon
            .log()
            .lines()
            .filter(|l| l.contains("eviction pass timing"))
            .count()
    };
    let seen = passes();
    wait_for("two more passes", Duration::from_secs(60), || {
        passes() >= seen + 2
    });
    assert_eq!(api.evictions().len(), 2, "{:?}", api.evictions());
    // The Events carry the limits' messages, as the kubelet's do.
    let messages: Vec<String> = api
        .events()
        .iter()
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m == "Usage of EmptyDir volume \"scratch\" exceeds the limit \"1Mi\". "),
        "{messages:?}"
    );
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}
