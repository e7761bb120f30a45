//! The API client and the pod watcher (src/kube) against the fake API
//! server (tests/support/kubeapi.rs): TLS and token auth, the kubeconfig
//! keys client-go reads (`tokenFile`, `tls-server-name`, `proxy-url`),
//! paging and expired `continue` tokens, the node field selector, watch
//! with bookmarks, an expired version answered as a real server does (200
//! and an `ERROR` event) → relist, a watch dropped mid-stream, a watch gone
//! silent, watches closed at once (backoff, not a hot loop), the server
//! going away and coming back.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::kubeapi::{fixture_pod, FakeApi};
use qosd_node::kube::client::KubeClient;
use qosd_node::kube::config::{from_kubeconfig, Auth, KubeConfig};
use qosd_node::kube::source::{list_pods, run_watcher, PodCache, WatchOptions};

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
        tls_server_name: None,
        proxy: None,
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

/// A watch gone silent (no FIN, no reset, no bookmark) is dead after its
/// idle limit: the view says so even within the disconnection bound, and
/// the watcher opens a new one that catches up from the last version.
#[tokio::test]
async fn a_silent_watch_turns_the_view_unavailable_and_reconnects() {
    let api = FakeApi::start();
    api.bookmark_every(Duration::from_millis(100));
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
    opts.idle_timeout = Duration::from_millis(800);
    opts.min_backoff = Duration::from_millis(50);
    let task = tokio::spawn(run_watcher(client(&api, d.path()), opts, cache.clone()));
    // The daemon's bound on a disconnected view.
    let bound = Duration::from_secs(10);
    wait_for("synced", || cache.view(bound).fresh()).await;
    wait_for("the watch", || api.open_watches() == 1).await;
    // Bookmarks every 100 ms keep a quiet watch alive past its idle limit.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        cache.view(bound).fresh(),
        "{:?}",
        cache.view(bound).unavailable
    );
    assert_eq!(
        cache.stats().watch_restarts,
        0,
        "no reconnect while bookmarks flow"
    );

    api.stall_watches();
    let t0 = Instant::now();
    wait_for("unavailable", || {
        cache
            .view(bound)
            .unavailable
            .is_some_and(|why| why.contains("silent"))
    })
    .await;
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(3), "unavailable after {took:?}");
    // A pod changed while the stream was silent arrives on the new watch.
    api.put_pod(fixture_pod(
        "web-burstable.json",
        "u-2",
        "two",
        "ns",
        "node-a",
    ));
    wait_for("a new watch", || api.open_watches() == 1).await;
    wait_for("caught up", || {
        let v = cache.view(bound);
        v.fresh() && v.pods.contains_key("u-2")
    })
    .await;
    // The server never closed the silent stream: qosd closed it when it
    // gave up on it (no connection left behind).
    wait_for("the silent connection closed by qosd", || {
        api.stalled_watches() == 0
    })
    .await;
    task.abort();
}

/// An expired version is answered as a real API server does — HTTP 200 and
/// one `ERROR` event with code 410 — and the watcher relists.
#[tokio::test]
async fn an_expired_version_gets_an_error_event_and_a_relist() {
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
    opts.min_backoff = Duration::from_millis(50);
    opts.max_backoff = Duration::from_millis(200);
    let task = tokio::spawn(run_watcher(client(&api, d.path()), opts, cache.clone()));
    let fresh = Duration::from_secs(30);
    wait_for("the watch", || api.open_watches() == 1).await;
    let relists = cache.stats().relists;
    // Away while history is compacted: the re-watch asks for a version
    // the server no longer has.
    api.go_away();
    api.expire();
    api.remove_pod("u-1");
    api.come_back();
    wait_for("the relist", || cache.stats().relists > relists).await;
    wait_for("the relisted view", || {
        let v = cache.view(fresh);
        v.fresh() && !v.pods.contains_key("u-1")
    })
    .await;
    let watches: Vec<u16> = api
        .requests()
        .iter()
        .filter(|r| r.query.contains("watch=1"))
        .map(|r| r.status)
        .collect();
    assert!(watches.iter().all(|c| *c == 200), "{watches:?}");
    task.abort();
}

/// A `continue` token that expired between two pages restarts the list as
/// one full list (client-go's pager), instead of failing it.
#[tokio::test]
async fn an_expired_continue_token_lists_again_in_one_page() {
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
    api.expire_continue_tokens_after(1);
    let mut opts = WatchOptions::new("node-a");
    opts.page_size = 2;
    let list = list_pods(&client(&api, d.path()), &opts).await.unwrap();
    assert_eq!(list.items.len(), 5);
    let lists: Vec<(u16, bool, bool)> = api
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods")
        .map(|r| {
            (
                r.status,
                r.query.contains("continue="),
                r.query.contains("limit="),
            )
        })
        .collect();
    assert_eq!(
        lists,
        [(200, false, true), (410, true, true), (200, false, false)]
    );
}

/// A server closing every watch at once is not hammered: short watches
/// back off (with jitter), and each watch asks for a jittered timeout.
#[tokio::test]
async fn watches_closed_at_once_back_off() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    api.close_watches_at_once(true);
    let cache = Arc::new(PodCache::default());
    let mut opts = WatchOptions::new("node-a");
    opts.min_backoff = Duration::from_millis(100);
    opts.max_backoff = Duration::from_secs(1);
    let task = tokio::spawn(run_watcher(client(&api, d.path()), opts, cache.clone()));
    wait_for("synced", || cache.stats().relists == 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    task.abort();
    let watches: Vec<String> = api
        .requests()
        .iter()
        .filter(|r| r.query.contains("watch=1"))
        .map(|r| r.query.clone())
        .collect();
    // 100, 200, 400, 800 ms, each stretched by up to 100 %: at most 5 in 2 s.
    assert!(
        (2..=6).contains(&watches.len()),
        "{} watches in 2 s: {watches:?}",
        watches.len()
    );
    let timeouts: Vec<u64> = watches
        .iter()
        .map(|q| {
            q.split('&')
                .find_map(|kv| kv.strip_prefix("timeoutSeconds="))
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        timeouts.iter().all(|t| (300..600).contains(t)),
        "{timeouts:?}"
    );
    assert!(
        timeouts.windows(2).any(|w| w[0] != w[1]),
        "jittered: {timeouts:?}"
    );
}

/// `tokenFile` (client-go's key) is read and sent; `tls-server-name`
/// verifies the certificate against that name; `proxy-url` (http://)
/// tunnels through CONNECT.
#[tokio::test]
async fn kubeconfig_token_file_server_name_and_proxy() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let opts = WatchOptions::new("node-a");
    let tok = d.path().join("token");
    std::fs::write(&tok, format!("{}\n", api.token)).unwrap();
    let kc = api.kubeconfig_with(d.path(), &format!("{{tokenFile: '{}'}}", tok.display()), "");
    let c = KubeClient::new(from_kubeconfig(&kc).unwrap()).unwrap();
    list_pods(&c, &opts).await.expect("tokenFile honoured");

    let user = format!("{{token: '{}'}}", api.token);
    let kc = api.kubeconfig_with(d.path(), &user, ", tls-server-name: localhost");
    let c = KubeClient::new(from_kubeconfig(&kc).unwrap()).unwrap();
    list_pods(&c, &opts)
        .await
        .expect("the certificate names localhost");
    let kc = api.kubeconfig_with(d.path(), &user, ", tls-server-name: api.example.test");
    let c = KubeClient::new(from_kubeconfig(&kc).unwrap()).unwrap();
    let e = list_pods(&c, &opts).await.unwrap_err().to_string();
    assert!(e.contains("TLS"), "{e}");

    let (proxy, seen) = connect_proxy().await;
    let kc = api.kubeconfig_with(
        d.path(),
        &user,
        &format!(", proxy-url: 'http://u:p@{proxy}'"),
    );
    let c = KubeClient::new(from_kubeconfig(&kc).unwrap()).unwrap();
    list_pods(&c, &opts).await.expect("through the proxy");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].starts_with(&format!("CONNECT {} HTTP/1.1\r\n", api.addr)),
        "{seen:?}"
    );
    assert!(
        seen[0].contains("Proxy-Authorization: Basic dTpw\r\n"),
        "{seen:?}"
    );
}

/// A minimal HTTP CONNECT proxy on loopback; records each request head.
async fn connect_proxy() -> (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let s = s.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                while !head.ends_with(b"\r\n\r\n") {
                    head.push(c.read_u8().await.unwrap());
                }
                let head = String::from_utf8(head).unwrap();
                let target = head.split_whitespace().nth(1).unwrap().to_string();
                s.lock().unwrap().push(head);
                let mut up = tokio::net::TcpStream::connect(target).await.unwrap();
                c.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .unwrap();
                let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
            });
        }
    });
    (addr, seen)
}

/// A kubeconfig key qosd cannot honour is refused before anything else:
/// exit 2 naming the file and the key.
#[test]
fn unsupported_kubeconfig_keys_exit_2_naming_the_key() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    for (user, extra, key) in [
        (
            "{token: t}",
            ", proxy-url: 'socks5://127.0.0.1:1080'",
            "proxy-url",
        ),
        (
            "{token: t}",
            ", proxy-url: 'https://127.0.0.1:3128'",
            "proxy-url",
        ),
        ("{token-file: /t}", "", "tokenFile"),
    ] {
        let kc = api.kubeconfig_with(d.path(), user, extra);
        let (code, _, err) = support::qosd(&[
            "pods",
            "--runtime-endpoint",
            "unix:///nonexistent/qosd-test.sock",
            "--kubeconfig",
            kc.to_str().unwrap(),
            "--node-name",
            "node-a",
        ]);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains(key) && err.contains(kc.to_str().unwrap()),
            "{err}"
        );
    }
}
