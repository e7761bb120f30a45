//! The static CPU manager on cgroup v2 with a multi-socket topology
//! (issue 18): one boot of the systemd node of tests/vm/ (systemd PID 1,
//! containerd with `SystemdCgroup = true`; docs/cgroup-v2-vm.md) with qemu's
//! `-smp 8,sockets=2,cores=2,threads=2` and one NUMA node per socket, so
//! the kernel's sysfs shows two packages whose core ids repeat (0 and 1 in
//! each), SMT siblings and two NUMA nodes. tests/vm/cpu_manager_v2.sh runs
//! real pods and the qosd daemon (`cpuManagerPolicy: static`, 300m
//! kubeReserved + 200m systemReserved cpu); this file judges what it read
//! from the VM's files:
//!
//! 1. x and g1 (Guaranteed, 1 CPU each) and b (Burstable) run; qosd starts:
//!    the reserved CPU is 0, x gets CPU 1 (the free sibling of reserved CPU
//!    0: the core with the fewest free CPUs first), g1 gets CPU 2, and b's
//!    container is moved onto the shared pool `0,3-7`, in the containers'
//!    cgroup v2 `cpuset.cpus`, `cpuset.cpus.effective` and their processes'
//!    `Cpus_allowed_list`;
//! 2. x goes: CPU 1 returns to the shared pool (state file);
//! 3. g2 (Guaranteed, 2 CPUs) arrives: no whole core is free on socket 0
//!    (CPUs 1 and 3 are the free halves of two cores), so the kubelet takes
//!    the first whole core of socket 1: CPUs 4-5. b is on `0-1,3,6-7`;
//! 4. qosd restarts: the assignment is kept from the state file (the
//!    kubelet's `cpu_manager_state` fields and checksum), byte for byte,
//!    with no cpuset written. A fresh start would have given g1 CPU 1 and
//!    g2 CPUs 2-3, so this shows the state was used.
//!
//! Emulation is slow and varies: no timing asserts (times are printed).

use crate::support;
use crate::vm;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use qosd_model::policy::cpu::state::CpuState;
use serde_json::Value;
use vm::Results;

const SCRIPT: &str = include_str!("cpu_manager_v2.sh");

/// The VM's CPUs: 2 sockets x 2 cores x 2 threads, a NUMA node per socket.
/// `vendor=GenuineIntel`: qemu's default (AMD) model under TCG has no SMT
/// ("doesn't support hyperthreading"); the Intel leaves give siblings.
const QEMU_TOPOLOGY: &[&str] = &[
    "--smp",
    "8,sockets=2,cores=2,threads=2",
    "--cpu",
    "qemu64,vendor=GenuineIntel",
    "--numa",
    "node,nodeid=0,cpus=0-3,memdev=m0",
    "--numa",
    "node,nodeid=1,cpus=4-7,memdev=m1",
];

/// Every reconcile tick notices new and gone pods (runtime fingerprint);
/// the liveness limit is 3 × the longer interval: 12 s, room for a slow
/// first pass under emulation.
const CONFIG: &str = r#"cgroupDriver: systemd
cgroupVersion: v2
runtimeEndpoint: "unix:///run/containerd/containerd.sock"
mode: enforce
reconcileInterval: "2s"
relistInterval: "4s"
metricsAddress: "127.0.0.1:9848"
rootDir: /var/lib/kubelet
mergeDefaultEvictionSettings: false
evictionHard:
  memory.available: "50Mi"
cpuManagerPolicy: static
cpuManagerStateDir: /var/lib/qosd
kubeReserved:
  cpu: 300m
systemReserved:
  cpu: 200m
"#;

const MI: i64 = 1024 * 1024;

struct TestPod {
    name: &'static str,
    uid: &'static str,
    /// CPU request = limit in millicores for Guaranteed pods; the request
    /// of a Burstable pod (no limit).
    cpu_millis: i64,
    guaranteed: bool,
}

const X: TestPod = TestPod {
    name: "x",
    uid: "c9a00000-0001-4000-8000-000000000001",
    cpu_millis: 1000,
    guaranteed: true,
};
const G1: TestPod = TestPod {
    name: "g1",
    uid: "c9a00000-0002-4000-8000-000000000002",
    cpu_millis: 1000,
    guaranteed: true,
};
const B: TestPod = TestPod {
    name: "b",
    uid: "c9a00000-0003-4000-8000-000000000003",
    cpu_millis: 100,
    guaranteed: false,
};
const G2: TestPod = TestPod {
    name: "g2",
    uid: "c9a00000-0004-4000-8000-000000000004",
    cpu_millis: 2000,
    guaranteed: true,
};

/// The kubelet's CRI values for one pause container per pod (the
/// kubelet's formulas: shares = m·1024/1000, quota = m·100).
fn pods_json(pods: &[&TestPod]) -> String {
    let v: Vec<Value> = pods
        .iter()
        .map(|p| {
            let slice = if p.guaranteed {
                format!("kubepods-pod{}.slice", p.uid.replace('-', "_"))
            } else {
                format!("kubepods-burstable-pod{}.slice", p.uid.replace('-', "_"))
            };
            serde_json::json!({
                "name": p.name,
                "namespace": "default",
                "uid": p.uid,
                "cgroup_parent": slice,
                "containers": [{
                    "name": "main",
                    "image": support::PAUSE_IMAGE,
                    "cpu_shares": p.cpu_millis * 1024 / 1000,
                    "cpu_quota": if p.guaranteed { p.cpu_millis * 100 } else { 0 },
                    "cpu_period": if p.guaranteed { 100_000 } else { 0 },
                    "memory_limit_in_bytes": if p.guaranteed { 32 * MI } else { 0 },
                    "oom_score_adj": if p.guaranteed { -997 } else { 999 },
                }],
            })
        })
        .collect();
    serde_json::to_string(&v).unwrap()
}

/// A container's cpusets in one phase, as read in the VM.
#[derive(Debug)]
struct Seen {
    cgroup: String,
    cpus: String,
    effective: String,
    allowed: String,
}

/// `CPUSET <phase> <pod> <cgroup> cpus=.. effective=.. allowed=..` lines.
fn cpusets(r: &Results, phase: &str) -> BTreeMap<String, Seen> {
    r.all("CPUSET")
        .into_iter()
        .filter_map(|l| l.strip_prefix(&format!("{phase} ")))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(w.len(), 5, "bad CPUSET line {l:?}");
            let field = |i: usize, k: &str| {
                w[i].strip_prefix(&format!("{k}="))
                    .unwrap_or_else(|| panic!("{k} in {l:?}"))
                    .to_string()
            };
            (
                w[0].to_string(),
                Seen {
                    cgroup: w[1].to_string(),
                    cpus: field(2, "cpus"),
                    effective: field(3, "effective"),
                    allowed: field(4, "allowed"),
                },
            )
        })
        .collect()
}

/// Each pod's container holds `want` (pod → CPU list) in its cgroup v2
/// `cpuset.cpus` and `cpuset.cpus.effective`, and its process may run on
/// exactly those CPUs.
fn check_cpusets(r: &Results, phase: &str, want: &[(&TestPod, &str)], ctx: &dyn Fn() -> String) {
    let seen = cpusets(r, phase);
    assert_eq!(
        seen.len(),
        want.len(),
        "{phase}: containers {:?}\n{}",
        seen.keys().collect::<Vec<_>>(),
        ctx()
    );
    for (pod, cpus) in want {
        let s = seen
            .get(pod.name)
            .unwrap_or_else(|| panic!("{phase}: no CPUSET for {}\n{}", pod.name, ctx()));
        let slice = if pod.guaranteed {
            format!(
                "/kubepods.slice/kubepods-pod{}.slice/",
                pod.uid.replace('-', "_")
            )
        } else {
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/",
                pod.uid.replace('-', "_")
            )
        };
        assert!(
            s.cgroup.starts_with(&slice) && s.cgroup.ends_with(".scope"),
            "{phase} {}: cgroup {}",
            pod.name,
            s.cgroup
        );
        assert_eq!(
            (&s.cpus[..], &s.effective[..], &s.allowed[..]),
            (*cpus, *cpus, *cpus),
            "{phase} {}: cpuset.cpus, cpuset.cpus.effective, Cpus_allowed_list\n{}",
            pod.name,
            ctx()
        );
    }
}

/// The state file of a phase: parsed (checksum verified) and as JSON.
fn state(r: &Results, phase: &str, ctx: &dyn Fn() -> String) -> (CpuState, Value, String) {
    let line = r
        .all("STATE")
        .into_iter()
        .find_map(|l| l.strip_prefix(&format!("{phase} ")))
        .unwrap_or_else(|| panic!("no STATE {phase}\n{}", ctx()));
    let st = CpuState::from_json(line.as_bytes())
        .unwrap_or_else(|e| panic!("{phase}: state file {line:?}: {e}\n{}", ctx()));
    let v: Value = serde_json::from_str(line).unwrap();
    (st, v, line.to_string())
}

/// The kubelet's checkpoint fields exactly: `policyName`, `defaultCpuSet`,
/// `entries` (pod uid → container → CPU list), `checksum` (a number).
fn check_state(v: &Value, default: &str, entries: &[(&TestPod, &str)]) {
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    let mut keys_sorted = keys.clone();
    keys_sorted.sort();
    assert_eq!(
        keys_sorted,
        ["checksum", "defaultCpuSet", "entries", "policyName"],
        "{v}"
    );
    assert_eq!(v["policyName"], "static", "{v}");
    assert_eq!(v["defaultCpuSet"], default, "{v}");
    assert!(
        v["checksum"].as_u64().is_some_and(|c| c > 0),
        "checksum: {v}"
    );
    let want: serde_json::Map<String, Value> = entries
        .iter()
        .map(|(p, cpus)| (p.uid.to_string(), serde_json::json!({ "main": cpus })))
        .collect();
    assert_eq!(v["entries"], Value::Object(want), "{v}");
}

#[test]
#[ignore = "needs root: boots the cgroup v2 VM (qemu)"]
fn static_policy_on_cgroup_v2_with_two_sockets() {
    let _vm = crate::vm::alone();
    let bins = vm::static_bins(&["qosd", "qosd-cri-pod"]);
    let tmp = tempfile::tempdir().unwrap();
    let put = |name: &str, text: &str| {
        let p = tmp.path().join(name);
        std::fs::write(&p, text).unwrap();
        (p, format!("test/{name}"))
    };
    let files: Vec<(PathBuf, String)> = vec![
        (support::images().pause_tar.clone(), "test/pause.tar".into()),
        put("config.yaml", CONFIG),
        put("pods1.json", &pods_json(&[&X, &G1, &B])),
        put("pods2.json", &pods_json(&[&G2])),
    ];
    let run = vm::run_systemd_script(
        SCRIPT,
        &bins,
        &files,
        Duration::from_secs(900),
        QEMU_TOPOLOGY,
    );
    let ctx = || run.context();
    run.assert_done("systemd VM run (8 vCPUs)");
    let r = Results { text: &run.results };

    // The topology the expected assignments below are derived for.
    assert_eq!(r.value("CGROUPFS"), "cgroup2fs");
    assert_eq!(r.value("ONLINE"), "0-7", "{}", ctx());
    assert_eq!(r.all("NODE"), ["0 0-3", "1 4-7"], "{}", ctx());
    let topo: BTreeMap<u32, String> = r
        .all("TOPO")
        .into_iter()
        .map(|l| {
            let (cpu, rest) = l.split_once(' ').unwrap();
            (cpu.parse().unwrap(), rest.to_string())
        })
        .collect();
    for cpu in 0..8u32 {
        let (pkg, core) = (cpu / 4, cpu % 4 / 2);
        let first = cpu / 2 * 2;
        assert_eq!(
            topo.get(&cpu).map(String::as_str),
            Some(format!("package={pkg} core={core} siblings={first}-{}", first + 1).as_str()),
            "qemu's topology changed: the expectations below assume it\n{}",
            ctx()
        );
    }
    assert_eq!(r.num("IMAGES"), 1, "{}", ctx());
    assert_eq!(r.num("PODS1_RC"), 0, "{}", ctx());
    for phase in ["one", "two", "three", "four"] {
        let s = r
            .all("SETTLED")
            .into_iter()
            .find_map(|l| l.strip_prefix(&format!("{phase} ")))
            .unwrap();
        let (have, want) = s.split_once('/').unwrap();
        assert!(
            have.parse::<u32>().unwrap() >= want.parse::<u32>().unwrap(),
            "{phase}: qosd made too few passes ({s})\n{}",
            ctx()
        );
    }

    // Before qosd: every container may run on every CPU.
    let before = cpusets(&r, "BEFORE");
    assert_eq!(before.len(), 3, "{}", ctx());
    for (name, s) in &before {
        assert_eq!(s.allowed, "0-7", "{name} before qosd: {s:?}\n{}", ctx());
    }

    // 1. reserved CPU 0; x on its free sibling 1; g1 on 2; b shared.
    check_cpusets(&r, "ONE", &[(&X, "1"), (&G1, "2"), (&B, "0,3-7")], &ctx);
    let (_, v, _) = state(&r, "ONE", &ctx);
    check_state(&v, "0,3-7", &[(&X, "1"), (&G1, "2")]);
    let subtree = r.value("SUBTREE");
    assert!(
        subtree.split_whitespace().any(|c| c == "cpuset"),
        "cpuset not enabled below kubepods.slice: {subtree}"
    );

    // 2. x goes: CPU 1 is shared again.
    assert_eq!(r.num("REMOVE_RC"), 0, "{}", ctx());
    let (_, v, _) = state(&r, "TWO", &ctx);
    check_state(&v, "0-1,3-7", &[(&G1, "2")]);

    // 3. g2: the first whole core of socket 1 (socket 0 has none left).
    assert_eq!(r.num("PODS2_RC"), 0, "{}", ctx());
    let three = [(&G1, "2"), (&B, "0-1,3,6-7"), (&G2, "4-5")];
    check_cpusets(&r, "THREE", &three, &ctx);
    let (st3, v, text3) = state(&r, "THREE", &ctx);
    check_state(&v, "0-1,3,6-7", &[(&G1, "2"), (&G2, "4-5")]);
    assert_eq!(st3.policy_name, "static");
    assert_eq!(r.value("EXIT d1"), "0", "{}", ctx());

    // 4. the restart keeps it all, and writes nothing.
    check_cpusets(&r, "FOUR", &three, &ctx);
    let (_, _, text4) = state(&r, "FOUR", &ctx);
    assert_eq!(text4, text3, "state file changed across the restart");
    let started = r.value("STARTED2");
    assert!(
        started.contains("shared_pool=0-1,3,6-7") && started.contains("reserved=0"),
        "the restarted qosd did not restore the state: {started}\n{}",
        ctx()
    );
    assert_eq!(r.num("SET2"), 0, "the restart re-set cpusets\n{}", ctx());
    assert_eq!(r.num("DRIFT2"), 0, "{}", ctx());
    assert_eq!(r.value("EXIT d2"), "0", "{}", ctx());
}
