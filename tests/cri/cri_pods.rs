//! `qosd pods` against a real containerd: every QoS class, multi-container
//! pods, a memory-limit-only pod, a class only inferable from oom_score_adj,
//! and a pod whose uid label is not a plain UID. Needs root (skips otherwise).

use std::collections::HashMap;

use crate::support::*;
use qosd_model::core::quantity::Quantity;
use serde_json::Value;

fn bytes(v: &Value) -> i64 {
    Quantity::parse(v.as_str().unwrap()).unwrap().value_ceil()
}

fn millis(v: &Value) -> i64 {
    Quantity::parse(v.as_str().unwrap()).unwrap().milli_ceil()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn pods_classify_each_qos_class() {
    require_containerd();
    let env = Containerd::start();
    let capacity = kubelet::memory_capacity();

    let guaranteed = PodSpec::new("guaranteed").container(
        ContainerSpec::pause("app")
            .cpu(Some(250), Some(250))
            .memory(Some(64 * MI), Some(64 * MI)),
    );
    // The kubelet's oom_score_adj only resolves requests above 0.2% of the
    // node's memory: ask for a tenth (pause uses none of it).
    let mem_req = capacity / 10 / MI * MI;
    let burstable = PodSpec::new("burstable").container(
        ContainerSpec::pause("app")
            .cpu(Some(100), Some(500))
            .memory(Some(mem_req), Some(2 * mem_req)),
    );
    let besteffort = PodSpec::new("besteffort")
        .container(ContainerSpec::pause("app"))
        .container(ContainerSpec::memhog("hog", &["4"]));
    let multi = PodSpec::new("multi")
        .container(
            ContainerSpec::pause("main")
                .cpu(Some(200), Some(200))
                .memory(Some(48 * MI), Some(48 * MI)),
        )
        .container(ContainerSpec::pause("sidecar"));
    let memlimit = PodSpec::new("memlimit-only")
        .container(ContainerSpec::pause("app").memory(None, Some(96 * MI)));
    let mut inferred = PodSpec::new("no-qos-parent")
        .container(ContainerSpec::pause("app").memory(Some(capacity / 4), None));
    inferred.cgroup_parent_override = Some(format!("custom/pod{}", inferred.uid));
    let mut evil = PodSpec::new("evil-uid").container(ContainerSpec::pause("app"));
    evil.uid_label_override = Some("../../../../etc".to_string());

    let specs = [
        &guaranteed,
        &burstable,
        &besteffort,
        &multi,
        &memlimit,
        &inferred,
        &evil,
    ];
    let t = std::time::Instant::now();
    let mut running = Vec::new();
    for s in specs {
        running.push(env.run_pod(s).await);
    }
    eprintln!("started {} pods in {:?}", running.len(), t.elapsed());

    let t = std::time::Instant::now();
    let (code, out, err) = qosd(&[
        "pods",
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        "json",
    ]);
    eprintln!("qosd pods --output json took {:?}", t.elapsed());
    assert_eq!(code, 0, "stderr: {err}");
    check_contract("pods", &out);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let pods: HashMap<String, &Value> = doc["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["uid"].as_str().unwrap().to_string(), p))
        .collect();

    // (spec, class, source)
    let expect = [
        (&guaranteed, "Guaranteed", "cgroup-parent"),
        (&burstable, "Burstable", "cgroup-parent"),
        (&besteffort, "BestEffort", "cgroup-parent"),
        (&multi, "Burstable", "cgroup-parent"),
        (&memlimit, "Burstable", "cgroup-parent"),
        (&inferred, "Burstable", "oom-score-adj"),
    ];
    for (spec, class, source) in expect {
        let p = pods
            .get(&spec.uid)
            .unwrap_or_else(|| panic!("pod {} missing from {out}", spec.name));
        assert_eq!(p["name"], spec.name.as_str());
        assert_eq!(p["namespace"], "qosd-test");
        assert_eq!(p["state"], "ready", "{}", spec.name);
        assert_eq!(p["qos_class"], class, "{}: {p:#}", spec.name);
        assert_eq!(p["qos_source"], source, "{}: {p:#}", spec.name);
        assert_eq!(
            p["cgroup_parent"],
            spec.cgroup_parent(&env.cgroup_root).as_str()
        );
        assert_eq!(
            p["warnings"].as_array().unwrap().len(),
            0,
            "{}: {:#}",
            spec.name,
            p["warnings"]
        );
        let cs = p["containers"].as_array().unwrap();
        assert_eq!(cs.len(), spec.containers.len(), "{}", spec.name);
        let run = running.iter().find(|r| r.spec.uid == spec.uid).unwrap();
        for (name, id, res) in &run.containers {
            let c = cs.iter().find(|c| c["name"] == name.as_str()).unwrap();
            assert_eq!(c["id"], id.as_str());
            assert_eq!(c["state"], "running");
            assert_eq!(c["cpu_shares"], res.cpu_shares, "{}/{name}", spec.name);
            let opt = |v: i64| if v > 0 { Value::from(v) } else { Value::Null };
            assert_eq!(c["cpu_quota"], opt(res.cpu_quota), "{}/{name}", spec.name);
            assert_eq!(c["cpu_period"], opt(res.cpu_period), "{}/{name}", spec.name);
            assert_eq!(c["memory_limit_bytes"], opt(res.memory_limit_in_bytes));
            let adj = c["oom_score_adj"].as_i64().unwrap();
            if res.oom_score_adj < 0 {
                // restrict_oom_score_adj: clamped to containerd's own score.
                assert!(
                    (res.oom_score_adj..=0).contains(&adj),
                    "{}/{name}: {adj}",
                    spec.name
                );
            } else {
                assert_eq!(adj, res.oom_score_adj, "{}/{name}", spec.name);
            }
        }
    }

    // Rebuilt requests/limits.
    let app = |uid: &str, name: &str| -> Value {
        pods[uid]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap()
            .clone()
    };
    let g = app(&guaranteed.uid, "app");
    assert_eq!(millis(&g["requests"]["cpu"]), 250);
    assert_eq!(millis(&g["limits"]["cpu"]), 250);
    assert_eq!(bytes(&g["requests"]["memory"]), 64 * MI);
    assert_eq!(bytes(&g["limits"]["memory"]), 64 * MI);
    let b = app(&burstable.uid, "app");
    assert_eq!(millis(&b["requests"]["cpu"]), 100);
    assert_eq!(millis(&b["limits"]["cpu"]), 500);
    assert_eq!(bytes(&b["limits"]["memory"]), 2 * mem_req);
    let m = bytes(&b["requests"]["memory"]);
    // The top of the request band its oom_score_adj pins (kubelet
    // formula, one unit = capacity/1000): never below the real request,
    // never more than one unit above it, never the limit.
    assert!(
        m >= mem_req && m - mem_req <= capacity / 1000 + 1 && m < 2 * mem_req,
        "inferred memory request {m} (real {mem_req})"
    );
    let e = app(&besteffort.uid, "hog");
    assert!(e["requests"].as_object().unwrap().is_empty());
    assert!(e["limits"].as_object().unwrap().is_empty());
    let side = app(&multi.uid, "sidecar");
    assert_eq!(side["cpu_shares"], 2);
    assert_eq!(side["oom_score_adj"], 999);
    let ml = app(&memlimit.uid, "app");
    assert_eq!(bytes(&ml["limits"]["memory"]), 96 * MI);
    // API-server defaulting: request = limit, consistent with oom_score_adj.
    assert_eq!(bytes(&ml["requests"]["memory"]), 96 * MI);
    let inf = &pods[&inferred.uid];
    assert!(
        inf["notes"]
            .to_string()
            .contains("inferred from oom_score_adj"),
        "{inf:#}"
    );

    // The pod with a malicious uid label is rejected and reported, not listed.
    assert!(!pods.contains_key("../../../../etc"));
    let evil_run = running.iter().find(|r| r.spec.uid == evil.uid).unwrap();
    let skipped = doc["skipped"].as_array().unwrap();
    let s = skipped
        .iter()
        .find(|s| s["sandbox_id"] == evil_run.sandbox_id.as_str())
        .unwrap_or_else(|| panic!("evil pod not reported: {skipped:?}"));
    assert!(
        s["reason"].as_str().unwrap().contains("not a plain UID"),
        "{s}"
    );

    // Text output: an aligned table, one row per pod with class and source;
    // the endpoint from CONTAINER_RUNTIME_ENDPOINT like crictl.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(["pods", "-o", "wide"])
        .env("CONTAINER_RUNTIME_ENDPOINT", &env.endpoint)
        .output()
        .unwrap();
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    assert!(out.status.success(), "{err}");
    let row = text
        .lines()
        .find(|l| l.starts_with("qosd-test/guaranteed "))
        .unwrap_or_else(|| panic!("no guaranteed row in\n{text}"));
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        &cells[1..4],
        ["ready", "Guaranteed", "cgroup-parent"],
        "{row}"
    );
    assert!(cells.contains(&guaranteed.uid.as_str()), "{row}");
    let header = text.lines().next().unwrap();
    assert!(header.starts_with("POD "), "{text}");
    assert_eq!(
        header.find("STATE"),
        row.find("ready"),
        "columns are aligned:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("Burstable") && l.contains("oom-score-adj")),
        "{text}"
    );
    assert!(text.contains("skipped sandbox"), "{text}");
    eprintln!("{text}");
}
