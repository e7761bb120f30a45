//! The API client and the pod watcher (src/kube) against the fake API
//! server (tests/support/kubeapi.rs): TLS and token auth, paging, the node
//! field selector, watch with bookmarks, 410 Gone → relist, a watch dropped
//! mid-stream, the server going away and coming back.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use qosd_node::kube::client::KubeClient;
use qosd_node::kube::config::{from_kubeconfig, Auth, KubeConfig};
use qosd_node::kube::source::{list_pods, run_watcher, PodCache, WatchOptions};
use support::kubeapi::{fixture_pod, FakeApi};

fn client(api: &FakeApi, dir: &std::path::Path) -> KubeClient {
    KubeClient::new(from_kubeconfig(&api.kubeconfig(dir)).unwrap()).unwrap()
}

async fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tls_and_token_are_checked() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let good = client(&api, d.path());
    let opts = WatchOptions::new("node-a");
    assert!(list_pods(&good, &opts).await.is_ok());

    let mut cfg = from_kubeconfig(&api.kubeconfig(d.path())).unwrap();
    cfg.auth = Auth::Token("wrong".into());
    let e = list_pods(&KubeClient::new(cfg).unwrap(), &opts)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(401), "{e}");

    // A CA that did not sign the server's certificate.
    let other = FakeApi::start();
    let cfg = KubeConfig {
        server: api.server(),
        ca_pem: other.ca_pem.clone().into_bytes(),
        auth: Auth::Token(api.token.clone()),
        origin: "test".into(),
    };
    let e = list_pods(&KubeClient::new(cfg).unwrap(), &opts)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("TLS"), "{e}");
}

#[tokio::test]
async fn list_pages_and_selects_this_node() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    for i in 0..5 {
        api.put_pod(fixture_pod(
            "web-burstable.json",
            &format!("u-{i}"),
            &format!("p-{i}"),
            "ns",
            "node-a",
        ));
    }
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-x",
        "elsewhere",
        "ns",
        "node-b",
    ));
    let mut opts = WatchOptions::new("node-a");
    opts.page_size = 2;
    let list = list_pods(&client(&api, d.path()), &opts).await.unwrap();
    let mut names: Vec<_> = list.items.iter().map(|p| p.metadata.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["p-0", "p-1", "p-2", "p-3", "p-4"]);
    let lists = api
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods")
        .count();
    assert_eq!(lists, 3, "three pages of two");
    assert!(api.schema_errors().is_empty());
}

#[tokio::test]
async fn watch_follows_bookmarks_expiry_drops_and_outages() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-1",
        "one",
        "ns",
        "node-a",
    ));
    let cache = Arc::new(PodCache::default());
    let mut opts = WatchOptions::new("node-a");
    opts.max_backoff = Duration::from_millis(400);
    let task = tokio::spawn(run_watcher(client(&api, d.path()), opts, cache.clone()));
    let fresh = Duration::from_secs(30);
    wait_for("the first list", || {
        cache.view(fresh).pods.contains_key("u-1")
    })
    .await;
    wait_for("the watch", || api.open_watches() == 1).await;

    // Live events; another node's pod is not seen.
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-2",
        "two",
        "ns",
        "node-a",
    ));
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-9",
        "nine",
        "ns",
        "node-b",
    ));
    wait_for("ADDED", || cache.view(fresh).pods.contains_key("u-2")).await;
    assert!(!cache.view(fresh).pods.contains_key("u-9"));

    // A bookmark moves the version without a change.
    api.bookmark();
    let rv_after_bookmark = api.pod("u-9").unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for("the bookmark", || {
        cache.stats().resource_version == rv_after_bookmark
    })
    .await;

    // 410 Gone: a relist.
    let relists = cache.stats().relists;
    api.expire();
    api.remove_pod("u-1");
    wait_for("the relist", || cache.stats().relists > relists).await;
    wait_for("the relisted view", || {
        !cache.view(fresh).pods.contains_key("u-1")
    })
    .await;

    // A watch cut mid-event: re-watch from the last version, nothing lost.
    wait_for("the watch again", || api.open_watches() == 1).await;
    let restarts = cache.stats().watch_restarts;
    api.drop_watches();
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-3",
        "three",
        "ns",
        "node-a",
    ));
    wait_for("the re-watch", || cache.stats().watch_restarts > restarts).await;
    wait_for("the event sent while cut", || {
        cache.view(fresh).pods.contains_key("u-3")
    })
    .await;

    // The server goes away: the view turns unavailable after the bound.
    api.go_away();
    wait_for("unavailable", || {
        cache
            .view(Duration::from_millis(300))
            .unavailable
            .is_some_and(|why| why.contains("no contact"))
    })
    .await;
    api.come_back();
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-4",
        "four",
        "ns",
        "node-a",
    ));
    wait_for("back", || {
        let v = cache.view(Duration::from_millis(300));
        v.fresh() && v.pods.contains_key("u-4")
    })
    .await;
    task.abort();
    let watch_queries: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.query.contains("watch=1"))
        .map(|r| r.query.clone())
        .collect();
    assert!(watch_queries
        .iter()
        .all(|q| q.contains("fieldSelector=spec.nodeName%3Dnode-a")
            && q.contains("allowWatchBookmarks=true")
            && q.contains("resourceVersion=")));
    assert!(api.schema_errors().is_empty());
}
