//! qosd beside a Kubernetes API server: the real containerd runs the pods
//! (tests/support), the API side is the fake API server
//! (tests/support/kubeapi.rs; no API server can be installed here) serving
//! the same pods' specs in `kubectl get pod -o json` shape.
//!
//! * exact priority and memory request (API) change the victim compared
//!   with the runtime's data alone, and a critical non-static pod is never
//!   evicted (`qosd eviction-order --cri --kubeconfig`);
//! * `qosd run --eviction-backend api`: a hard eviction refused with 429,
//!   then one the API never answers, fall back to the local kill plus the
//!   kubelet's eviction record on the pod's status (Failed, Evicted,
//!   DisruptionTarget/TerminationByKubelet; the object is not deleted),
//!   each with an `Evicted` Event;
//! * a soft eviction throttled (429, Retry-After) asks for the same pod
//!   again once Retry-After has passed; refused by a disruption budget
//!   (429), it moves to the next pod;
//! * the API going away mid-run degrades to the runtime's data alone (said
//!   in /status, /readyz, metrics) and no eviction uses the stale specs.
//!
//! Needs root (containerd, cgroups).

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::kubeapi::{fixture_pod, Answer, FakeApi};
use crate::support::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};

const NODE: &str = "qosd-test-node";

fn quantity(bytes: i64) -> String {
    format!("{}Ki", bytes / 1024)
}

/// The API's view of a pod the test runs: the fixture's shape, the pod's
/// identity, its containers' requests and limits, priority, class.
fn api_pod(p: &RunningPod, priority: i32, class_name: Option<&str>) -> Value {
    let mut v = fixture_pod(
        "web-burstable.json",
        &p.spec.uid,
        &p.spec.name,
        &p.spec.namespace,
        NODE,
    );
    let containers: Vec<Value> = p
        .spec
        .containers
        .iter()
        .map(|c| {
            let mut requests = serde_json::Map::new();
            let mut limits = serde_json::Map::new();
            let (cr, cl) = (c.cpu_request_milli, c.cpu_limit_milli);
            if let Some(r) = cr {
                requests.insert("cpu".into(), json!(format!("{r}m")));
            }
            if let Some(l) = cl {
                limits.insert("cpu".into(), json!(format!("{l}m")));
            }
            if let Some(r) = c.memory_request {
                requests.insert("memory".into(), json!(quantity(r)));
            }
            if let Some(l) = c.memory_limit {
                limits.insert("memory".into(), json!(quantity(l)));
            }
            json!({
                "name": c.name,
                "image": c.image,
                "imagePullPolicy": "IfNotPresent",
                "resources": {"requests": requests, "limits": limits},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            })
        })
        .collect();
    v["spec"]["containers"] = json!(containers);
    v["spec"]["priority"] = json!(priority);
    match class_name {
        Some(c) => v["spec"]["priorityClassName"] = json!(c),
        None => {
            v["spec"]
                .as_object_mut()
                .unwrap()
                .remove("priorityClassName");
        }
    }
    v["spec"]["terminationGracePeriodSeconds"] = json!(5);
    v["status"]["qosClass"] = json!(p.class.as_str());
    v
}

fn order(out: &str) -> (Vec<String>, Vec<String>) {
    let doc: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let uids = |k: &str| {
        doc[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["uid"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    (uids("order"), uids("never_evicted"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
// The guard is held across awaits on purpose: it keeps the tests that
// take it apart for the whole test, each on its own runtime.
#[allow(clippy::await_holding_lock)]
async fn exact_priority_and_request_change_the_victim() {
    let _serial = crate::support::serial();
    require_containerd();
    let env = Containerd::start();
    // A Burstable pod with a request below 0.1 % of the node: the runtime
    // cannot tell its request (oom_score_adj 999), the API can.
    let small = env
        .run_pod(
            &PodSpec::new("small-request").container(
                ContainerSpec::pause("app")
                    .cpu(Some(50), None)
                    .memory(Some(16 * MI), Some(GI)),
            ),
        )
        .await;
    let be = env
        .run_pod(&PodSpec::new("besteffort").container(ContainerSpec::pause("app")))
        .await;
    // High priority (API only), and a system-cluster-critical pod that is
    // not static (a Deployment's): the runtime sees priority 0 for both.
    let high = env
        .run_pod(&PodSpec::new("high-priority").container(ContainerSpec::pause("app")))
        .await;
    let critical = env
        .run_pod(&PodSpec::new("coredns").container(ContainerSpec::pause("app")))
        .await;
    let api = FakeApi::start();
    api.put_pod(api_pod(&small, 0, None));
    api.put_pod(api_pod(&be, 0, None));
    api.put_pod(api_pod(&high, 1_000_000, Some("high")));
    api.put_pod(api_pod(
        &critical,
        2_000_000_000,
        Some("system-cluster-critical"),
    ));
    let d = tempfile::tempdir().unwrap();
    let usage = d.path().join("usage.json");
    std::fs::write(
        &usage,
        json!({"pods": {
            small.spec.uid.clone(): {"memory_working_set_bytes": 40 * MI},
            be.spec.uid.clone(): {"memory_working_set_bytes": 10 * MI},
            high.spec.uid.clone(): {"memory_working_set_bytes": 500 * MI},
            critical.spec.uid.clone(): {"memory_working_set_bytes": 900 * MI},
        }})
        .to_string(),
    )
    .unwrap();
    let kubeconfig = api.kubeconfig(d.path());
    let base = [
        "eviction-order",
        "--cri",
        "--runtime-endpoint",
        &env.endpoint,
        "--cgroup-root",
        &env.cgroup_root,
        "--usage",
        usage.to_str().unwrap(),
        "--output",
        "json",
    ];
    let (code, out, err) = qosd(&base);
    assert_eq!(code, 0, "{err}");
    let (runtime_order, runtime_never) = order(&out);
    let mut with_api = base.to_vec();
    with_api.extend([
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
    ]);
    let (code, out, err) = qosd(&with_api);
    assert_eq!(code, 0, "{err}");
    let (exact_order, exact_never) = order(&out);

    // Runtime alone: every pod priority 0; the small pod's request is
    // unknown, so its limit (1Gi) counts and it looks within it; the others
    // are over their (zero) requests, biggest user first — the critical pod.
    assert_eq!(
        runtime_order,
        vec![
            critical.spec.uid.clone(),
            high.spec.uid.clone(),
            be.spec.uid.clone(),
            small.spec.uid.clone()
        ]
    );
    assert!(runtime_never.is_empty());
    // Exact: the critical pod is never evicted; the small pod is 24Mi over
    // its exact 16Mi request, the BestEffort one 10Mi over; the
    // high-priority pod goes after every priority-0 pod over its request.
    assert_eq!(exact_never, vec![critical.spec.uid.clone()]);
    assert_eq!(
        exact_order,
        vec![
            small.spec.uid.clone(),
            be.spec.uid.clone(),
            high.spec.uid.clone()
        ]
    );
    assert_ne!(runtime_order[0], exact_order[0], "the victim changes");

    // `qosd pods` says which values are exact.
    let (code, out, err) = qosd(&[
        "pods",
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        "json",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
    ]);
    assert_eq!(code, 0, "{err}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    let crit = doc["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["uid"] == json!(critical.spec.uid))
        .unwrap();
    assert_eq!(crit["priority"], 2_000_000_000);
    assert_eq!(crit["priority_class_name"], "system-cluster-critical");
    assert_eq!(crit["sources"]["priority"], "exact");
    assert_eq!(crit["sources"]["requests"], "exact");
    // Runtime alone, the wide listing names the inferred values per pod.
    let (_, text, _) = qosd(&["pods", "--runtime-endpoint", &env.endpoint, "-o", "wide"]);
    assert!(text.contains("INFERRED"), "{text}");
    let small_row = text
        .lines()
        .find(|l| l.starts_with("qosd-test/small-request "))
        .unwrap_or_else(|| panic!("no small-request row: {text}"));
    assert!(small_row.contains("ephemeralStorage"), "{text}");
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}

/// Start `qosd run` against the env and the fake API with extra flags.
fn start_daemon(env: &Containerd, kubeconfig: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec!["run"];
    args.extend(env.qosd_flags());
    args.extend([
        "--node-memory",
        "512Mi",
        "--eviction-backend",
        "api",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--node-name",
        NODE,
        "--reconcile-interval",
        "2s",
    ]);
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

fn wait_synced(port: u16, exact: u64) {
    wait_for("the API view merged", Duration::from_secs(30), || {
        let s = status_json(port);
        s["kubernetes"]["state"] == "synced"
            && s["kubernetes"]["pods_exact"].as_u64() == Some(exact)
            && s["signals"].as_array().is_some_and(|a| !a.is_empty())
    });
}

/// One series' value; 0 while it is not exposed yet (a labelled counter
/// appears at its first increment).
fn metric(port: u16, series: &str) -> f64 {
    sample(&metrics_text(port), series).unwrap_or(0.0)
}

/// Keep `allocatableMemory.available` below 280 Mi (grow `pid`'s memhog)
/// until the API saw `n` evictions (30 s at most).
fn press_until_evictions(api: &FakeApi, port: u16, pid: i32, n: usize) {
    let start = Instant::now();
    while api.evictions().len() < n && start.elapsed() < Duration::from_secs(30) {
        if metric(
            port,
            "qosd_signal_available_bytes{eviction_signal=\"allocatableMemory.available\"}",
        ) > (280 * MI) as f64
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGUSR1);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Grow `pid`'s memhog with SIGUSR1 until it dies (or `limit`).
fn grow_until_dead(pid: i32, limit: Duration) {
    let start = Instant::now();
    while alive(pid) && start.elapsed() < limit {
        let _ = kill(Pid::from_raw(pid), Signal::SIGUSR1);
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
// The guard is held across awaits on purpose: it keeps the tests that
// take it apart for the whole test, each on its own runtime.
#[allow(clippy::await_holding_lock)]
async fn hard_eviction_refused_or_unanswered_falls_back_to_local_kill_and_evicted_status() {
    let _serial = crate::support::serial();
    require_containerd();
    let env = Containerd::start();
    let g = env
        .run_pod(
            &PodSpec::new("guaranteed").container(
                ContainerSpec::memhog("hog", &["40"])
                    .cpu(Some(100), Some(100))
                    .memory(Some(128 * MI), Some(128 * MI)),
            ),
        )
        .await;
    let be1 = env
        .run_pod(
            &PodSpec::new("besteffort-1")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])),
        )
        .await;
    let be2 = env
        .run_pod(
            &PodSpec::new("besteffort-2")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])),
        )
        .await;
    let api = FakeApi::start();
    for p in [&g, &be1, &be2] {
        api.put_pod(api_pod(p, 0, None));
    }
    // The first eviction is refused by a PDB, the second never answered.
    api.script_evictions(&[Answer::TooManyRequests, Answer::Hang]);
    let d = tempfile::tempdir().unwrap();
    let daemon = start_daemon(
        &env,
        &api.kubeconfig(d.path()),
        &[
            "--eviction-hard",
            "allocatableMemory.available<100Mi",
            "--api-eviction-timeout",
            "1s",
        ],
    );
    let port = daemon.port;
    wait_synced(port, 3);
    let g_pid = env.container_pid(&g.containers[0].1).await;
    let p1 = env.container_pid(&be1.containers[0].1).await;
    let p2 = env.container_pid(&be2.containers[0].1).await;

    grow_until_dead(p1, Duration::from_secs(20));
    assert!(!alive(p1), "refused (429): killed locally");
    wait_for("the status after the kill", Duration::from_secs(10), || {
        api.status_patches().len() == 1
    });
    assert_kubelet_record(&api.pod(&be1.spec.uid).expect("the object is not deleted"));
    grow_until_dead(p2, Duration::from_secs(20));
    assert!(!alive(p2), "no answer: killed locally");
    wait_for("the second status", Duration::from_secs(10), || {
        api.status_patches().len() == 2
    });
    wait_for("the status counted", Duration::from_secs(10), || {
        metric(
            port,
            "qosd_api_evictions_total{path=\"fallback_status_set\"}",
        ) == 2.0
    });
    assert!(api.deletes().is_empty(), "no pod deleted");
    assert!(alive(g_pid), "the Guaranteed pod survives");
    assert_hard_fallbacks_recorded(&api, &be1.spec.uid, port);
}

/// The kubelet's record on a pod it evicted itself: phase Failed, reason
/// Evicted, condition DisruptionTarget/TerminationByKubelet.
fn assert_kubelet_record(p: &Value) {
    assert_eq!(p["status"]["phase"], "Failed");
    assert_eq!(p["status"]["reason"], "Evicted");
    assert!(p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "DisruptionTarget" && c["reason"] == "TerminationByKubelet"));
}

/// After two hard fallbacks (the first refused with 429, the second never
/// answered): what the API was asked, the records, the Events, the counts.
fn assert_hard_fallbacks_recorded(api: &FakeApi, be1_uid: &str, port: u16) {
    let ev = api.evictions();
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!((ev[0].1.as_str(), ev[0].3), ("besteffort-1", 429));
    assert_eq!(
        (ev[1].1.as_str(), ev[1].3),
        ("besteffort-2", 0),
        "unanswered"
    );
    for (_, _, body, _) in &ev {
        assert_eq!(body["deleteOptions"]["gracePeriodSeconds"], 1, "hard: 1 s");
    }
    let patches = api.status_patches();
    assert_eq!(patches[0].1, "besteffort-1");
    assert_eq!(patches[0].2["metadata"]["uid"], json!(be1_uid));
    let events = api.events();
    assert_eq!(events.len(), 2, "{events:?}");
    for e in &events {
        assert_eq!(e["reason"], "Evicted");
        assert_eq!(e["type"], "Warning");
        let m = e["message"].as_str().unwrap();
        assert!(
            m.starts_with(
                "The node was low on resource: memory. Threshold quantity: 100Mi, available: "
            ),
            "{m}"
        );
        assert!(m.contains("Container hog was using "), "{m}");
        assert!(
            m.contains(", request is 0, has larger consumption of memory. "),
            "{m}"
        );
    }
    assert_eq!(events[0]["involvedObject"]["uid"], json!(be1_uid));
    let m = metrics_text(port);
    for series in [
        "qosd_api_evictions_total{path=\"fallback_local_kill\"} 2\n",
        "qosd_api_evictions_total{path=\"fallback_status_set\"} 2\n",
        "qosd_api_eviction_events_total{result=\"created\"} 2\n",
    ] {
        assert!(m.contains(series), "{series} in {m}");
    }
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
// The guard is held across awaits on purpose: it keeps the tests that
// take it apart for the whole test, each on its own runtime.
#[allow(clippy::await_holding_lock)]
async fn soft_eviction_throttled_then_refused_moves_to_the_next_pod() {
    let _serial = crate::support::serial();
    require_containerd();
    let env = Containerd::start();
    let big = env
        .run_pod(
            &PodSpec::new("big")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])),
        )
        .await;
    let next = env
        .run_pod(&PodSpec::new("next").container(ContainerSpec::memhog("hog", &["24"])))
        .await;
    let api = FakeApi::start();
    for p in [&big, &next] {
        api.put_pod(api_pod(p, 0, None));
    }
    // Throttled first (API Priority and Fairness, Retry-After 2 s), then
    // refused by a disruption budget.
    api.script_evictions(&[Answer::Throttled(2), Answer::TooManyRequests]);
    let d = tempfile::tempdir().unwrap();
    let daemon = start_daemon(
        &env,
        &api.kubeconfig(d.path()),
        &[
            "--eviction-hard",
            "allocatableMemory.available<10Mi",
            "--eviction-soft",
            "allocatableMemory.available<300Mi",
            "--eviction-soft-grace-period",
            "allocatableMemory.available=1s",
            "--eviction-max-pod-grace-period",
            "30",
        ],
    );
    let port = daemon.port;
    wait_synced(port, 2);
    let big_pid = env.container_pid(&big.containers[0].1).await;
    let next_pid = env.container_pid(&next.containers[0].1).await;
    press_until_evictions(&api, port, big_pid, 3);
    let ev = api.evictions();
    assert!(ev.len() >= 3, "{ev:?}");
    let asked: Vec<(&str, u16)> = ev.iter().map(|e| (e.1.as_str(), e.3)).collect();
    assert_eq!(
        asked[..3],
        [("big", 429), ("big", 429), ("next", 201)],
        "the biggest user first, throttled; the same pod again, refused; then the next pod"
    );
    let asked_at = api.eviction_times();
    let waited = asked_at[1] - asked_at[0];
    assert!(
        waited >= Duration::from_secs(2),
        "asked again after {waited:?}, before Retry-After"
    );
    // Soft: min(evictionMaxPodGracePeriod 30, terminationGracePeriodSeconds 5).
    assert_eq!(ev[2].2["deleteOptions"]["gracePeriodSeconds"], 5);
    assert!(
        alive(big_pid),
        "a refused soft eviction kills nothing locally"
    );
    assert!(
        alive(next_pid),
        "the API evicts (the kubelet would stop it), not qosd"
    );
    assert!(api.deletes().is_empty());
    // The Event and the metric follow the accepted POST: wait for them.
    wait_for(
        "the Event and the evicted count",
        Duration::from_secs(10),
        || {
            !api.events().is_empty()
                && metric(port, "qosd_api_evictions_total{path=\"evicted\"}") >= 1.0
        },
    );
    let events = api.events();
    assert_eq!(events[0]["involvedObject"]["name"], "next");
    assert!(
        metric(
            port,
            "qosd_api_evictions_total{path=\"refused_next_candidate\"}"
        ) >= 1.0
    );
    // One throttling answer, counted once (not on every pass of the wait).
    assert_eq!(
        metric(port, "qosd_api_evictions_total{path=\"throttled_retry\"}"),
        1.0
    );
    assert!(metric(port, "qosd_api_evictions_total{path=\"evicted\"}") >= 1.0);
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
// The guard is held across awaits on purpose: it keeps the tests that
// take it apart for the whole test, each on its own runtime.
#[allow(clippy::await_holding_lock)]
async fn api_going_away_degrades_to_runtime_data_without_stale_evictions() {
    let _serial = crate::support::serial();
    require_containerd();
    let env = Containerd::start();
    // A Burstable pod within its exact request (64Mi; the runtime cannot
    // tell it below 0.1 % of the node) and a BestEffort one.
    let within = env
        .run_pod(
            &PodSpec::new("within-request").container(
                ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])
                    .cpu(Some(50), None)
                    .memory(Some(20 * MI), Some(GI)),
            ),
        )
        .await;
    let critical = env
        .run_pod(
            &PodSpec::new("critical")
                .container(ContainerSpec::memhog("hog", &["8", "16", "3600000", "480"])),
        )
        .await;
    let api = FakeApi::start();
    api.put_pod(api_pod(&within, 0, None));
    api.put_pod(api_pod(
        &critical,
        2_000_000_000,
        Some("system-cluster-critical"),
    ));
    let d = tempfile::tempdir().unwrap();
    let daemon = start_daemon(
        &env,
        &api.kubeconfig(d.path()),
        &["--eviction-hard", "allocatableMemory.available<100Mi"],
    );
    let port = daemon.port;
    wait_synced(port, 2);
    assert_eq!(metric(port, "qosd_kube_api_up"), 1.0);

    api.go_away();
    wait_for("degraded", Duration::from_secs(40), || {
        let s = status_json(port);
        s["kubernetes"]["state"] == "unavailable"
            && s["kubernetes"]["pods_inferred"].as_u64() == Some(2)
            && s["degraded"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|d| d.as_str().unwrap_or("").starts_with("kubernetes-api: "))
            })
    });
    assert_eq!(metric(port, "qosd_kube_api_up"), 0.0);
    assert_eq!(metric(port, "qosd_kube_pods{source=\"inferred\"}"), 2.0);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let ready = support::http::get(addr, "/readyz", Duration::from_secs(2)).unwrap();
    assert!(
        ready.body.contains("degraded: kubernetes-api: "),
        "{}",
        ready.body
    );

    // Pressure now: the critical pod keeps its (immutable) priority; the
    // other's requests are the runtime's again.
    let w_pid = env.container_pid(&within.containers[0].1).await;
    let c_pid = env.container_pid(&critical.containers[0].1).await;
    let start = Instant::now();
    while alive(w_pid) && start.elapsed() < Duration::from_secs(25) {
        let _ = kill(Pid::from_raw(w_pid), Signal::SIGUSR1);
        let _ = kill(Pid::from_raw(c_pid), Signal::SIGUSR1);
        std::thread::sleep(Duration::from_millis(120));
    }
    assert!(
        !alive(w_pid),
        "evicted on the runtime's data (killed locally: no API)"
    );
    assert!(alive(c_pid), "a critical pod is never evicted");
    let s = status_json(port);
    let last = &s["last_evictions"][0];
    assert_eq!(last["uid"], json!(within.spec.uid));
    // Decided on the runtime's data: the request is the top of the band
    // its oom_score_adj pins (never the 1Gi limit), not the stale spec's 20Mi.
    let request = last["request_bytes"].as_i64().unwrap_or_default();
    assert!(
        request > 20 * MI && request < GI,
        "request_bytes {request}: not from the runtime's oom_score_adj band"
    );
    assert!(
        api.evictions().is_empty(),
        "nothing reached the API while it was away"
    );
    assert_eq!(
        metric(
            port,
            "qosd_api_evictions_total{path=\"fallback_local_kill\"}"
        ),
        1.0
    );
}
