//! Container processes' `oom_score_adj` on this host with pods in a real
//! containerd: `qosd run` (enforce: no kubelet) restores the kubelet's
//! value on a process whose value was changed after it started, a dry run
//! shows the writes it would make and makes none, audit reports without
//! writing, and a value the kernel refuses (a Guaranteed container's −997:
//! root here lacks CAP_SYS_RESOURCE) is counted in `/status` and logged
//! once, not retried into the log. Needs root.

use std::time::Duration;

use crate::support::*;
use qosd_model::core::model::QosClass;
use serde_json::Value;

fn adj(pid: i32) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn set_adj(pid: i32, v: i64) {
    std::fs::write(format!("/proc/{pid}/oom_score_adj"), v.to_string()).unwrap();
    assert_eq!(adj(pid), v);
}

fn run_once(env: &Containerd, extra: &[&str]) -> Value {
    let mut args = vec!["run", "--once", "--output", "json"];
    args.extend(env.qosd_flags());
    args.extend_from_slice(extra);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "qosd run --once failed: {err}\n{out}");
    check_contract("run-once", &out);
    serde_json::from_str(&out).unwrap()
}

/// (pid, planned, found) of the entries of `doc.oom_score_adj.<key>`.
fn entries(doc: &Value, key: &str) -> Vec<(i32, i64, i64)> {
    let mut v: Vec<(i32, i64, i64)> = doc["oom_score_adj"][key]
        .as_array()
        .unwrap_or_else(|| panic!("no oom_score_adj.{key}: {doc}"))
        .iter()
        .map(|e| {
            (
                e["pid"].as_i64().unwrap() as i32,
                e["planned"].as_i64().unwrap(),
                e["found"].as_i64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn run_sets_audits_and_counts_container_oom_score_adj() {
    require_containerd();
    let env = Containerd::start();
    let be = env
        .run_pod(&PodSpec::new("be").container(ContainerSpec::pause("app")))
        .await;
    let b = env
        .run_pod(
            &PodSpec::new("b").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(200))
                    .memory(Some(512 * MI), Some(1024 * MI)),
            ),
        )
        .await;
    let g = env
        .run_pod(
            &PodSpec::new("g").container(
                ContainerSpec::pause("app")
                    .cpu(Some(100), Some(100))
                    .memory(Some(64 * MI), Some(64 * MI)),
            ),
        )
        .await;
    let be_pid = env.container_pid(&be.containers[0].1).await;
    let b_pid = env.container_pid(&b.containers[0].1).await;
    let g_pid = env.container_pid(&g.containers[0].1).await;
    let capacity = kubelet::memory_capacity();
    let b_planned = kubelet::oom_score_adj(QosClass::Burstable, Some(512 * MI), capacity);
    assert!((3..=999).contains(&b_planned));
    // What the runtime set at start: the kubelet's values, but the
    // Guaranteed −997 is raised to containerd's own value
    // (restrict_oom_score_adj: it lacks CAP_SYS_RESOURCE too).
    assert_eq!(adj(be_pid), 1000);
    assert_eq!(adj(b_pid), b_planned);
    let g_found = adj(g_pid);
    assert!(g_found >= 0, "{g_found}");

    // Someone changes two values after start (raising or lowering within
    // [0, 1000] needs no capability).
    set_adj(be_pid, 300);
    set_adj(b_pid, 100);

    // Dry run: the writes it would make, none made.
    let dry = run_once(&env, &["--dry-run"]);
    let would = entries(&dry, "writes");
    for want in [
        (be_pid, 1000, 300),
        (b_pid, b_planned, 100),
        (g_pid, -997, g_found),
    ] {
        assert!(would.contains(&want), "{want:?} not in {would:?}");
    }
    assert_eq!((adj(be_pid), adj(b_pid)), (300, 100), "dry run wrote");
    let (code, text, err) = {
        let mut a = vec!["run", "--once", "--dry-run"];
        a.extend(env.qosd_flags());
        qosd(&a)
    };
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&format!(
            "would set oom_score_adj of qosd-test/be app pid {be_pid} = 1000 (was 300)"
        )),
        "{text}"
    );

    // Audit (beside a kubelet): reported, not written.
    let audit = run_once(&env, &["--cgroup-enforcement", "audit"]);
    let differing = entries(&audit, "differing");
    for want in [(be_pid, 1000, 300), (b_pid, b_planned, 100)] {
        assert!(differing.contains(&want), "{want:?} not in {differing:?}");
    }
    assert!(entries(&audit, "writes").is_empty(), "{audit}");
    assert_eq!((adj(be_pid), adj(b_pid)), (300, 100), "audit wrote");

    // Enforce: restored; the Guaranteed −997 refused by the kernel, counted.
    let first = run_once(&env, &[]);
    let written = entries(&first, "writes");
    assert!(written.contains(&(be_pid, 1000, 300)), "{written:?}");
    assert!(written.contains(&(b_pid, b_planned, 100)), "{written:?}");
    assert_eq!((adj(be_pid), adj(b_pid)), (1000, b_planned));
    let refused = first["oom_score_adj"]["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 1, "{first}");
    assert_eq!(refused[0]["pod"], "g");
    assert_eq!(refused[0]["planned"], -997);
    assert_eq!(adj(g_pid), g_found, "a refused write changes nothing");
    assert!(first["oom_score_adj"]["errors"]
        .as_array()
        .unwrap()
        .is_empty());
    // Steady: nothing more to write.
    let second = run_once(&env, &[]);
    assert!(entries(&second, "writes").is_empty(), "{second}");

    // The daemon: /status and metrics count; a changed value is restored;
    // the refusal is logged once.
    let mut args = env.run_args(None);
    args.extend(["--mode", "enforce"]);
    let d = Daemon::start(&args);
    let status = || {
        d.get("/status")
            .and_then(|r| serde_json::from_str::<Value>(&r.body).ok())
            .unwrap_or(Value::Null)
    };
    wait_for("oom_score_adj in /status", Duration::from_secs(60), || {
        status()["oom_score_adj"]["refused_containers"].as_u64() == Some(1)
    });
    let s = status();
    assert_eq!(s["oom_score_adj"]["mode"], "enforce", "{s}");
    assert_eq!(s["oom_score_adj"]["differing"], 1, "{s}");
    assert!(
        s["oom_score_adj"]["processes"].as_u64().unwrap() >= 3,
        "{s}"
    );
    // The documented shape (what `qosd status -o json` adds filled in).
    let mut doc = s.clone();
    doc["source"] = "daemon".into();
    doc["address"] = d.addr.to_string().into();
    doc["notes"] = serde_json::json!([]);
    check_schema("status", &doc.to_string());
    set_adj(be_pid, 200);
    // Put back at the safety-net check: every 60th reconcile while
    // containerd's event stream is live (60 s at this test's 1 s interval).
    wait_for(
        "value restored by the daemon",
        Duration::from_secs(150),
        || adj(be_pid) == 1000,
    );
    wait_for("write counted", Duration::from_secs(30), || {
        status()["oom_score_adj"]["written_total"].as_u64() >= Some(1)
    });
    let m = d.metrics();
    assert_eq!(
        sample(&m, "qosd_oom_score_adj_refused_containers"),
        Some(1.0),
        "{m}"
    );
    assert!(
        sample(&m, "qosd_oom_score_adj_writes_total").unwrap() >= 1.0,
        "{m}"
    );
    assert_eq!(sample(&m, "qosd_oom_score_adj_differing"), Some(1.0), "{m}");
    // Several more passes: the refusal stays logged once.
    let at = status()["last_reconcile"]["at_ms"].as_u64().unwrap();
    wait_for("more passes", Duration::from_secs(30), || {
        status()["last_reconcile"]["at_ms"].as_u64().unwrap_or(0) > at + 2000
    });
    let refusals = d
        .log()
        .lines()
        .filter(|l| l.contains("oom_score_adj refused by the kernel"))
        .count();
    assert_eq!(refusals, 1, "{}", d.log());
    d.stop();

    // Beside a kubelet (audit): /status counts the difference, nothing is
    // written however many passes run.
    set_adj(be_pid, 300);
    let mut args = env.run_args(None);
    args.extend(["--mode", "enforce", "--cgroup-enforcement", "audit"]);
    let a = Daemon::start(&args);
    let status = || {
        a.get("/status")
            .and_then(|r| serde_json::from_str::<Value>(&r.body).ok())
            .unwrap_or(Value::Null)
    };
    wait_for("audit in /status", Duration::from_secs(60), || {
        let s = status();
        s["oom_score_adj"]["mode"] == "audit"
            && s["oom_score_adj"]["values"]
                .as_array()
                .is_some_and(|v| v.iter().any(|e| e["pid"] == be_pid && e["found"] == 300))
    });
    let at = status()["last_reconcile"]["at_ms"].as_u64().unwrap();
    wait_for("more audit passes", Duration::from_secs(30), || {
        status()["last_reconcile"]["at_ms"].as_u64().unwrap_or(0) > at + 2000
    });
    assert_eq!(adj(be_pid), 300, "audit wrote");
    assert_eq!(status()["oom_score_adj"]["written_total"], 0);
    let m = a.metrics();
    assert!(
        sample(&m, "qosd_oom_score_adj_differing").unwrap() >= 2.0,
        "{m}"
    );
    a.stop();
}
