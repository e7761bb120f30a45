//! The API calls of an eviction (qosd_node::kube::evict, and the `api`
//! backend of qosd_node::evict::Evictor) against the fake API server
//! (tests/support/kubeapi.rs), which answers as a real one: grace periods
//! and the object's life (grace 0 removes it at once, finalizers keep it),
//! the answers told apart (a disruption budget, throttling with
//! `Retry-After`, the uid precondition, 404, 500), an answer after the
//! deadline learnt and counted, connecting kept out of the answer's
//! deadline, and the kubelet's eviction record left on the status after a
//! local kill. No root needed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::kubeapi::{fixture_pod, Answer, FakeApi};
use qosd_model::core::model::QosClass;
use qosd_model::policy::evict::manager::{Cause, Victim};
use qosd_model::policy::evict::rank::{Candidate, PodStats};
use qosd_model::policy::evict::threshold::{Signal, Threshold, ThresholdKind, ThresholdValue};
use qosd_model::policy::evict::Backend;
use qosd_node::evict::runtime::EvictRuntime;
use qosd_node::evict::{ApiEvictor, ApiRefusal, Evictor};
use qosd_node::kube::client::KubeClient;
use qosd_node::kube::config::from_kubeconfig;
use qosd_node::kube::evict::{mark_evicted, post_eviction, Deadlines, EvictAnswer};
use serde_json::{json, Value};

const NODE: &str = "node-a";

fn client(api: &FakeApi, dir: &std::path::Path) -> KubeClient {
    KubeClient::new(from_kubeconfig(&api.kubeconfig(dir)).unwrap()).unwrap()
}

fn pod(uid: &str, name: &str) -> Value {
    let mut p = fixture_pod("web-burstable.json", uid, name, "ns", NODE);
    p["spec"]["terminationGracePeriodSeconds"] = json!(30);
    p
}

fn soft() -> Deadlines {
    Deadlines {
        connect: Duration::from_secs(2),
        answer: Duration::from_secs(2),
        total: false,
    }
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The eviction side's runtime, as the daemon shares it.
fn rt() -> EvictRuntime {
    EvictRuntime::new().unwrap()
}

fn evict(rt: &EvictRuntime, c: &KubeClient, name: &str, uid: &str, grace: i64) -> EvictAnswer {
    post_eviction(rt, c, "ns", name, uid, grace, soft(), |_| {})
}

/// The API server's deletion: grace 0 removes the object at once (before
/// the kubelet stopped anything); a grace ≥ 1 keeps it, deleting, until
/// the kubelet confirms; finalizers keep it even then.
#[test]
fn grace_decides_whether_the_object_outlives_its_containers() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let c = client(&api, d.path());
    let rt = rt();
    api.put_pod(pod("u-0", "zero"));
    api.put_pod(pod("u-1", "one"));
    let mut fin = pod("u-f", "final");
    fin["metadata"]["finalizers"] = json!(["example.com/keep"]);
    api.put_pod(fin);

    assert_eq!(evict(&rt, &c, "zero", "u-0", 0), EvictAnswer::Evicted);
    assert!(api.pod("u-0").is_none(), "grace 0: gone at once");

    assert_eq!(evict(&rt, &c, "one", "u-1", 1), EvictAnswer::Evicted);
    let p = api.pod("u-1").expect("grace 1: still there, deleting");
    assert_eq!(p["metadata"]["deletionGracePeriodSeconds"], 1);
    assert!(p["metadata"]["deletionTimestamp"].is_string());
    let cond = &p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .cloned()
        .unwrap();
    assert_eq!(cond["reason"], "EvictionByEvictionAPI");
    api.kubelet_finishes("u-1");
    assert!(api.pod("u-1").is_none(), "gone once the kubelet confirms");

    assert_eq!(evict(&rt, &c, "final", "u-f", 0), EvictAnswer::Evicted);
    assert!(api.pod("u-f").is_some(), "a finalizer keeps it");
    api.remove_finalizers("u-f");
    assert!(api.pod("u-f").is_none());
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}

/// A disruption budget (with or without Retry-After), throttling (API
/// Priority and Fairness: plain text, Retry-After), the uid precondition,
/// 404 and 500 are told apart.
#[test]
fn eviction_answers_are_told_apart() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let c = client(&api, d.path());
    let rt = rt();
    api.put_pod(pod("u-1", "web"));
    api.script_evictions(&[
        Answer::TooManyRequests,
        Answer::PdbProcessing,
        Answer::Throttled(3),
        Answer::NotFound,
        Answer::ServerError,
    ]);
    let r = evict(&rt, &c, "web", "u-1", 5);
    assert!(
        matches!(&r, EvictAnswer::Refused(m) if m.contains("disruption budget")),
        "{r:?}"
    );
    let r = evict(&rt, &c, "web", "u-1", 5);
    assert!(
        matches!(&r, EvictAnswer::Refused(_)),
        "budget being processed: {r:?}"
    );
    let r = evict(&rt, &c, "web", "u-1", 5);
    assert!(
        matches!(&r, EvictAnswer::Throttled { retry_after, message }
            if *retry_after == Duration::from_secs(3) && message.contains("Too many requests")),
        "{r:?}"
    );
    assert!(matches!(
        evict(&rt, &c, "web", "u-1", 5),
        EvictAnswer::Gone(_)
    ));
    assert!(matches!(
        evict(&rt, &c, "web", "u-1", 5),
        EvictAnswer::Failed(_)
    ));
    // The uid precondition: a newer pod has the name.
    let r = evict(&rt, &c, "web", "u-old", 5);
    assert!(
        matches!(&r, EvictAnswer::Gone(m) if m.contains("409") && m.contains("UID in the precondition")),
        "{r:?}"
    );
    assert!(api.pod("u-1").unwrap()["metadata"]["deletionTimestamp"].is_null());
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}

/// An answer after the deadline is not lost: the caller learns the
/// request was sent and not answered (no second pod), and the late answer
/// arrives — the effect is what counts.
#[test]
fn an_answer_after_the_deadline_is_learnt() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let c = client(&api, d.path());
    api.put_pod(pod("u-1", "web"));
    api.script_evictions(&[Answer::Late(Duration::from_millis(700))]);
    let late = Arc::new(Mutex::new(None));
    let l = late.clone();
    let r = post_eviction(
        &rt(),
        &c,
        "ns",
        "web",
        "u-1",
        5,
        Deadlines {
            connect: Duration::from_secs(2),
            answer: Duration::from_millis(200),
            total: false,
        },
        move |a| *l.lock().unwrap() = Some(a),
    );
    assert!(
        matches!(&r, EvictAnswer::Unanswered(m) if m.contains("sent")),
        "{r:?}"
    );
    wait_until("the late answer", Duration::from_secs(5), || {
        late.lock().unwrap().is_some()
    });
    assert_eq!(*late.lock().unwrap(), Some(EvictAnswer::Evicted));
    assert!(api.pod("u-1").unwrap()["metadata"]["deletionTimestamp"].is_string());
}

/// Connecting has its own bound: a slow handshake does not eat the
/// answer's deadline; a connection not made in time sends nothing (so
/// moving to another pod is safe).
#[test]
fn connecting_is_not_in_the_answer_deadline() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let c = client(&api, d.path());
    let rt = rt();
    api.put_pod(pod("u-1", "web"));
    api.put_pod(pod("u-2", "next"));
    api.slow_handshakes(Duration::from_millis(600));
    let d1 = Deadlines {
        connect: Duration::from_secs(2),
        answer: Duration::from_millis(400),
        total: false,
    };
    assert_eq!(
        post_eviction(&rt, &c, "ns", "web", "u-1", 5, d1, |_| {}),
        EvictAnswer::Evicted
    );
    let d2 = Deadlines {
        connect: Duration::from_millis(200),
        ..d1
    };
    let r = post_eviction(&rt, &c, "ns", "next", "u-2", 5, d2, |_| {});
    assert!(
        matches!(&r, EvictAnswer::Failed(m) if m.contains("nothing sent")),
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(1200));
    let names: Vec<String> = api.evictions().iter().map(|e| e.1.clone()).collect();
    assert_eq!(names, ["web"], "nothing sent for the second");
    assert!(api.pod("u-2").unwrap()["metadata"]["deletionTimestamp"].is_null());
}

/// After a local kill, the kubelet's record: status phase Failed, reason
/// Evicted, the message, DisruptionTarget/TerminationByKubelet — the
/// object is not deleted; a newer pod of the name is left alone;
/// throttling answers 429 with Retry-After.
#[tokio::test]
async fn the_kubelet_eviction_record_on_the_status() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let c = client(&api, d.path());
    api.put_pod(pod("u-1", "web"));
    let t = Duration::from_secs(2);
    let msg = "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. ";
    api.throttle_requests(1, 2);
    let e = mark_evicted(&c, "ns", "web", "u-1", msg, "2030-01-01T00:00:00Z", t)
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.retry_after()),
        (Some(429), Some(Duration::from_secs(2)))
    );
    mark_evicted(&c, "ns", "web", "u-1", msg, "2030-01-01T00:00:00Z", t)
        .await
        .unwrap();
    let p = api.pod("u-1").expect("the object stays");
    assert_eq!(p["status"]["phase"], "Failed");
    assert_eq!(p["status"]["reason"], "Evicted");
    assert_eq!(p["status"]["message"], msg);
    let cond = p["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "DisruptionTarget")
        .cloned()
        .unwrap();
    assert_eq!(
        (cond["status"].as_str(), cond["reason"].as_str()),
        (Some("True"), Some("TerminationByKubelet"))
    );
    assert!(p["metadata"]["deletionTimestamp"].is_null());
    assert!(api.deletes().is_empty());
    // Other conditions are kept (merged by type).
    assert!(p["status"]["conditions"].as_array().unwrap().len() > 1);

    api.put_pod(pod("u-2", "again"));
    let e = mark_evicted(&c, "ns", "again", "u-old", msg, "2030-01-01T00:00:00Z", t)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(409), "{e}");
    assert_eq!(api.pod("u-2").unwrap()["status"]["phase"], "Running");
    assert!(api.schema_errors().is_empty(), "{:?}", api.schema_errors());
}

/// The `api` backend as the daemon drives it, with a minimal API side on
/// the crate's calls: a soft eviction with the default
/// evictionMaxPodGracePeriod (0) still gives 1 s, so the pod object stays
/// until its containers stop.
#[test]
fn a_soft_eviction_never_sends_grace_zero() {
    let api = FakeApi::start();
    let d = tempfile::tempdir().unwrap();
    let c = client(&api, d.path());
    api.put_pod(pod("u-1", "web"));
    struct Side(EvictRuntime, KubeClient);
    impl ApiEvictor for Side {
        fn evict(&self, v: &Victim, grace: Duration) -> Result<(), ApiRefusal> {
            match post_eviction(
                &self.0,
                &self.1,
                &v.candidate.namespace,
                &v.candidate.name,
                &v.candidate.uid,
                grace.as_secs() as i64,
                soft(),
                |_| {},
            ) {
                EvictAnswer::Evicted => Ok(()),
                a => Err(ApiRefusal::Failed(format!("{a:?}"))),
            }
        }
        fn mark_evicted_after_kill(
            &self,
            _v: &Victim,
        ) -> Result<(), qosd_node::kube::client::KubeError> {
            Ok(())
        }
    }
    let mut e = Evictor::new(Backend::Api, None, Duration::ZERO);
    e.api = Some(Arc::new(Side(rt(), c)));
    e.evict(&victim("u-1", "web", ThresholdKind::Soft, Duration::ZERO))
        .unwrap();
    let ev = api.evictions();
    assert_eq!(ev[0].2["deleteOptions"]["gracePeriodSeconds"], 1);
    assert!(
        api.pod("u-1").is_some(),
        "the object outlives the eviction request until the kubelet confirms"
    );
}

fn victim(uid: &str, name: &str, kind: ThresholdKind, grace: Duration) -> Victim {
    let mut candidate = Candidate::new(
        &qosd_model::core::model::Pod::new(uid, "ns", name),
        QosClass::BestEffort,
        0,
        0,
        None,
    );
    candidate.stats = Some(PodStats::default());
    let threshold = Threshold {
        signal: Signal::MemoryAvailable,
        kind,
        value: ThresholdValue::Quantity(100 << 20),
        grace_period: Duration::ZERO,
        min_reclaim: None,
    };
    Victim {
        candidate,
        signal: Signal::MemoryAvailable,
        threshold,
        kind,
        observed: 50 << 20,
        capacity: 1 << 30,
        threshold_value: 100 << 20,
        grace,
        rank: 1,
        usage: None,
        request: 0,
        reason: String::new(),
        cause: Cause::Threshold,
        message: String::new(),
    }
}
