//! The CRI status cache kept across restarts (`<stateDir>/cri-status-cache.json`),
//! against a real containerd: a restarted source with the file lists (and so
//! plans) exactly what a fresh inventory does although pods changed while it
//! was down, and a restarted `qosd run` asks no sandbox status it already
//! knew, and catches an in-place resize made while it was down right after
//! its first reconcile.

use std::time::Duration;

use crate::support::*;
use qosd_node::cri::{ConnectOptions, InventoryOptions};
use qosd_node::pods::{PodSourceSpec, Source};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn a_restored_cache_lists_like_a_fresh_inventory() {
    require_containerd();
    let env = Containerd::start();
    let state = tempfile::tempdir().unwrap();
    let a = env
        .run_pod(
            &PodSpec::new("a").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await;
    let b = env
        .run_pod(
            &PodSpec::new("b")
                .container(ContainerSpec::pause("app").cpu(Some(50), Some(200)))
                .container(ContainerSpec::pause("side").memory(Some(8 * MI), None)),
        )
        .await;
    let c = env
        .run_pod(&PodSpec::new("c").container(ContainerSpec::pause("app")))
        .await;
    let spec = PodSourceSpec::Cri {
        endpoint: env.endpoint.clone(),
    };
    let opts = InventoryOptions {
        memory_capacity_bytes: Some(kubelet::memory_capacity()),
    };
    let client = env.client().await;
    let fresh = || async {
        let mut p = qosd_node::cri::inventory(&client, &opts)
            .await
            .unwrap()
            .pods;
        p.sort_by(|x, y| x.sandbox_id.cmp(&y.sandbox_id));
        p
    };

    // The first run: list, write the file.
    {
        let source = Source::connect(&spec, ConnectOptions::default(), kubelet::memory_capacity())
            .await
            .unwrap();
        source.list().await.unwrap();
        assert_eq!(source.cached_statuses(), (3, 4));
        let store = source.status_store(&spec, state.path()).unwrap();
        store.save_now();
        assert!(store.path().is_file());
    }

    // While "qosd is down": b stops, c goes away, d arrives.
    client.stop_pod_sandbox(&b.sandbox_id).await.unwrap();
    env.remove_pod(&c).await;
    let d = env
        .run_pod(
            &PodSpec::new("d").container(
                ContainerSpec::pause("app")
                    .cpu(Some(250), None)
                    .memory(Some(16 * MI), Some(64 * MI)),
            ),
        )
        .await;

    // The restart: the file's entries first, then one listing.
    let source = Source::connect(&spec, ConnectOptions::default(), kubelet::memory_capacity())
        .await
        .unwrap();
    let mut store = source.status_store(&spec, state.path()).unwrap();
    assert_eq!(store.load(), 4, "a's, b's two and c's container statuses");
    assert_eq!(source.cached_statuses(), (3, 4));
    let listing = source.list().await.unwrap();
    let mut live = listing.live.clone();
    live.sort_by(|x, y| x.sandbox_id.cmp(&y.sandbox_id));
    let want = fresh().await;
    assert_eq!(live, want);
    let ids: Vec<&str> = live.iter().map(|p| p.sandbox_id.as_str()).collect();
    for (p, listed) in [(&a, true), (&b, true), (&c, false), (&d, true)] {
        assert_eq!(ids.contains(&p.sandbox_id.as_str()), listed, "{ids:?}");
    }
    // The planner's input is the same pods: the same plan.
    let mut planned = listing.pods.clone();
    planned.sort_by(|x, y| x.uid.cmp(&y.uid));
    let mut ready: Vec<_> = qosd_node::cri::Inventory {
        pods: want,
        skipped: Vec::new(),
    }
    .ready_pods();
    ready.sort_by(|x, y| x.uid.cmp(&y.uid));
    assert_eq!(planned, ready);
    assert_eq!(planned.len(), 2, "a and d are ready, b stopped");
    // c's entries are gone; b's exited containers were asked about again
    // (their listed state changed), d's are new.
    assert_eq!(source.cached_statuses(), (3, 4));
    store.save_now();
    let text = std::fs::read_to_string(store.path()).unwrap();
    assert!(!text.contains(&c.sandbox_id), "c's sandbox still written");
    assert!(text.contains(&d.sandbox_id), "d's sandbox not written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn a_restarted_daemon_asks_only_about_new_ids_and_catches_a_resize() {
    require_containerd();
    let env = Containerd::start();
    let state = tempfile::tempdir().unwrap();
    let state_env = state.path().as_os_str();
    let pods = [
        env.run_pod(
            &PodSpec::new("g").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await,
        env.run_pod(
            &PodSpec::new("burst").container(ContainerSpec::pause("app").cpu(Some(100), Some(400))),
        )
        .await,
    ];
    let burst = &pods[1];
    let args = env.run_args(None);
    let ready = |d: &Daemon| {
        wait_for("/readyz 200", Duration::from_secs(60), || {
            d.code("/readyz") == Some(200)
        })
    };
    let calls = |d: &Daemon, method: &str| {
        let m = d.metrics();
        sample(&m, &format!("qosd_cri_calls_total{{method=\"{method}\"}}"))
    };

    // First start: no file yet, every status asked, the file written at stop.
    let d = Daemon::start_with(&args, &[("QOSD_STATE_DIR", state_env)]);
    ready(&d);
    assert_eq!(calls(&d, "PodSandboxStatus"), Some(2.0));
    d.stop();
    let file = state.path().join("cri-status-cache.json");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("the file is written at stop"))
            .unwrap();
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["endpoint"], env.endpoint.as_str());
    for p in &pods {
        assert!(saved["sandboxes"].get(&p.sandbox_id).is_some(), "{saved}");
    }

    // While qosd is down: the Burstable container's CPU request doubles in
    // place (as the kubelet resizes it), and a new pod arrives.
    let client = env.client().await;
    let mut res = ContainerSpec::pause("app")
        .cpu(Some(200), Some(400))
        .linux_resources(
            qosd_model::core::model::QosClass::Burstable,
            kubelet::memory_capacity(),
        );
    res.cpu_shares = kubelet::shares(200);
    client
        .update_container_resources(&burst.containers[0].1, res)
        .await
        .unwrap();
    let late = env
        .run_pod(&PodSpec::new("late").container(ContainerSpec::pause("app")))
        .await;

    // The restart: the file is used, only the new sandbox is asked about.
    let d = Daemon::start_with(&args, &[("QOSD_STATE_DIR", state_env)]);
    ready(&d);
    let log = d.log();
    assert!(
        log.contains("CRI status cache restored") && log.contains("sandboxes=2"),
        "{log}"
    );
    // Right after the first reconcile every container is asked again: the
    // pod cgroup follows the resize (the kubelet's shares of the new request).
    let pod_shares = env.cgroup_dir("cpu", burst).join("cpu.shares");
    wait_for(
        "the resized request in the pod's cpu.shares",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&pod_shares)
                .map(|s| s.trim() == kubelet::shares(200).to_string())
                .unwrap_or(false)
        },
    );
    assert_eq!(
        calls(&d, "PodSandboxStatus"),
        Some(1.0),
        "only the pod that arrived while qosd was down"
    );
    assert!(calls(&d, "ContainerStatus").unwrap_or(0.0) >= 3.0);
    d.stop();
    let _ = late;

    // A corrupt file: one warning, everything asked, still ready.
    std::fs::write(&file, b"{not json").unwrap();
    let d = Daemon::start_with(&args, &[("QOSD_STATE_DIR", state_env)]);
    ready(&d);
    let log = d.log();
    assert!(log.contains("CRI status cache ignored"), "{log}");
    assert_eq!(calls(&d, "PodSandboxStatus"), Some(3.0));
    d.stop();
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["sandboxes"].as_object().unwrap().len(), 3);
}
