//! `qosd plan --cri` against a real containerd: the plan for the live pods
//! classifies them like `qosd pods` and has the kubelet's pod-level values,
//! and changes nothing. Needs root (`#[ignore]`d: scripts/test runs it as root).

use std::collections::HashMap;

use crate::support::*;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and creates cgroups"]
async fn plan_cri_matches_live_pods() {
    require_containerd();
    let env = Containerd::start();
    let guaranteed = PodSpec::new("guaranteed").container(
        ContainerSpec::pause("app")
            .cpu(Some(250), Some(250))
            .memory(Some(64 * MI), Some(64 * MI)),
    );
    let burstable = PodSpec::new("burstable").container(
        ContainerSpec::pause("app")
            .cpu(Some(100), Some(500))
            .memory(Some(32 * MI), Some(128 * MI)),
    );
    let besteffort = PodSpec::new("besteffort").container(ContainerSpec::pause("app"));
    let memlimit = PodSpec::new("memlimit-only")
        .container(ContainerSpec::pause("app").memory(None, Some(96 * MI)));
    let specs = [&guaranteed, &burstable, &besteffort, &memlimit];
    let mut parents = HashMap::new();
    for s in specs {
        let r = env.run_pod(s).await;
        parents.insert(s.uid.clone(), r.cgroup_parent.clone());
    }
    let read = |p: &str, f: &str| {
        let ctrl = if f.starts_with("memory") {
            "memory"
        } else {
            "cpu"
        };
        std::fs::read_to_string(format!("/sys/fs/cgroup/{ctrl}{p}/{f}")).ok()
    };
    let before: Vec<_> = parents
        .values()
        .flat_map(|p| {
            ["cpu.shares", "cpu.cfs_quota_us", "memory.limit_in_bytes"].map(|f| read(p, f))
        })
        .collect();

    let (code, out, err) = qosd(&[
        "plan",
        "--cri",
        "--runtime-endpoint",
        &env.endpoint,
        "--cgroup-version",
        "v1",
        "--cgroup-driver",
        "cgroupfs",
        "--cgroup-root",
        &env.cgroup_root,
        "--node-cpu",
        "8",
        "--node-memory",
        "32Gi",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "stderr: {err}");
    check_contract("plan", &out);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let pods: HashMap<&str, &Value> = doc["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["uid"].as_str().unwrap(), p))
        .collect();
    let writes: HashMap<&str, &str> = doc["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["file"].as_str().unwrap(), w["value"].as_str().unwrap()))
        .collect();
    let write = |uid: &str, ctrl: &str, file: &str| -> Option<String> {
        let f = format!("/sys/fs/cgroup/{ctrl}{}/{file}", parents[uid]);
        writes.get(f.as_str()).map(|v| v.to_string())
    };

    for (spec, class) in [
        (&guaranteed, "Guaranteed"),
        (&burstable, "Burstable"),
        (&besteffort, "BestEffort"),
        (&memlimit, "Burstable"),
    ] {
        let p = pods
            .get(spec.uid.as_str())
            .unwrap_or_else(|| panic!("{} not planned: {out}", spec.name));
        assert_eq!(p["qos_class"], class, "{}", spec.name);
        assert_eq!(
            p["cgroup"].as_str().unwrap().trim_start_matches('/'),
            parents[&spec.uid].trim_start_matches('/'),
            "{}",
            spec.name
        );
    }
    let g = guaranteed.uid.as_str();
    assert_eq!(write(g, "cpu", "cpu.shares").as_deref(), Some("256"));
    assert_eq!(
        write(g, "cpu", "cpu.cfs_quota_us").as_deref(),
        Some("25000")
    );
    assert_eq!(
        write(g, "memory", "memory.limit_in_bytes").as_deref(),
        Some((64 * MI).to_string().as_str())
    );
    let b = burstable.uid.as_str();
    assert_eq!(write(b, "cpu", "cpu.shares").as_deref(), Some("102"));
    assert_eq!(
        write(b, "cpu", "cpu.cfs_quota_us").as_deref(),
        Some("50000")
    );
    assert_eq!(
        write(b, "memory", "memory.limit_in_bytes").as_deref(),
        Some((128 * MI).to_string().as_str())
    );
    let e = besteffort.uid.as_str();
    assert_eq!(write(e, "cpu", "cpu.shares").as_deref(), Some("2"));
    assert_eq!(write(e, "cpu", "cpu.cfs_quota_us"), None);
    let m = memlimit.uid.as_str();
    assert_eq!(write(m, "cpu", "cpu.shares").as_deref(), Some("2"));
    assert_eq!(write(m, "cpu", "cpu.cfs_quota_us"), None);
    assert_eq!(
        write(m, "memory", "memory.limit_in_bytes").as_deref(),
        Some((96 * MI).to_string().as_str())
    );

    // A plan changes nothing.
    let after: Vec<_> = parents
        .values()
        .flat_map(|p| {
            ["cpu.shares", "cpu.cfs_quota_us", "memory.limit_in_bytes"].map(|f| read(p, f))
        })
        .collect();
    assert_eq!(before, after);
}
