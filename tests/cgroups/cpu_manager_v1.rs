//! The static CPU manager on this machine's real cgroup v1 cpuset
//! controller with pods in a real containerd (this host has CPUs 0-1):
//! with CPU 0 reserved, a Guaranteed 1-CPU pod's container gets CPU 1 to
//! itself, a Burstable pod's container is moved off it (checked in the
//! real `cpuset.cpus`), drift is corrected, a restart of qosd keeps the
//! assignment (state file in the kubelet's format), a pod that does not fit
//! is refused and stays shared, and a pod that goes frees its CPU.

use std::path::{Path, PathBuf};

use crate::support::*;
use qosd_model::policy::cpu::state::CpuState;
use qosd_node::cri::proto;

fn cpuset(env: &Containerd, pod: &RunningPod) -> String {
    let p = env
        .container_cgroup_dir("cpuset", pod, &pod.containers[0].1)
        .join("cpuset.cpus");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

fn run_once(env: &Containerd, state_dir: &Path) -> String {
    let mut args = vec!["run", "--once", "--output", "json"];
    args.extend(env.qosd_flags());
    args.extend([
        "--cpu-manager-policy",
        "static",
        "--reserved-cpus",
        "0",
        "--cpu-manager-state-dir",
        state_dir.to_str().unwrap(),
    ]);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "qosd run --once failed: {err}\n{out}");
    err
}

fn state(dir: &Path) -> CpuState {
    let bytes = std::fs::read(dir.join("cpu_manager_state")).expect("state file written");
    CpuState::from_json(&bytes).expect("a valid kubelet-format checkpoint (checksum verified)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root: starts containerd and writes cgroup v1 cpusets"]
async fn static_policy_pins_a_guaranteed_pod_on_real_cgroup_v1() {
    require_containerd();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    assert_eq!(
        online.trim(),
        "0-1",
        "this test is written for a 2-CPU machine"
    );
    assert!(
        Path::new("/sys/fs/cgroup/cpuset").is_dir(),
        "needs the cgroup v1 cpuset controller at /sys/fs/cgroup/cpuset"
    );
    let env = Containerd::start();
    let dir = tempfile::tempdir().unwrap();
    let state_dir: PathBuf = dir.path().join("qosd");

    let g = env
        .run_pod(
            &PodSpec::new("g").container(
                ContainerSpec::pause("app")
                    .cpu(Some(1000), Some(1000))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await;
    let b = env
        .run_pod(&PodSpec::new("b").container(ContainerSpec::pause("app").cpu(Some(100), None)))
        .await;
    assert_eq!(
        cpuset(&env, &g),
        "0-1",
        "runc starts containers on every CPU"
    );
    assert_eq!(cpuset(&env, &b), "0-1");

    // 1. the assignment, in the real cgroups
    let log = run_once(&env, &state_dir);
    assert_eq!(
        cpuset(&env, &g),
        "1",
        "the Guaranteed container owns CPU 1\n{log}"
    );
    assert_eq!(
        cpuset(&env, &b),
        "0",
        "the Burstable container is moved off CPU 1\n{log}"
    );
    let st = state(&state_dir);
    assert_eq!(st.policy_name, "static");
    assert_eq!(st.default.to_string(), "0");
    assert_eq!(
        st.get(&g.spec.uid, "app").map(|s| s.to_string()).as_deref(),
        Some("1")
    );
    assert_eq!(st.get(&b.spec.uid, "app"), None);

    // `qosd pods` shows each container's cpuset.
    let (code, out, err) = qosd(&[
        "pods",
        "--runtime-endpoint",
        &env.endpoint,
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let find = |uid: &str| {
        v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["uid"] == uid)
            .map(|p| p["containers"][0]["cpuset_cpus"].clone())
            .unwrap()
    };
    assert_eq!(find(&g.spec.uid), "1", "{out}");
    assert_eq!(find(&b.spec.uid), "0", "{out}");

    // Audit mode against a kubelet state file that disagrees about g:
    // differences are reported, nothing is changed.
    let mut kubelet = CpuState {
        policy_name: "static".into(),
        default: qosd_model::policy::cpu::CpuSet::parse("1").unwrap(),
        ..Default::default()
    };
    kubelet.set(
        &g.spec.uid,
        "app",
        qosd_model::policy::cpu::CpuSet::parse("0").unwrap(),
    );
    let kfile = dir.path().join("kubelet_cpu_manager_state");
    std::fs::write(&kfile, kubelet.to_json()).unwrap();
    let mut args = vec!["run", "--once"];
    args.extend(env.qosd_flags());
    args.extend([
        "--cpu-manager-policy",
        "static",
        "--reserved-cpus",
        "0",
        "--kubelet-cpu-manager-state",
        kfile.to_str().unwrap(),
    ]);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "{err}{out}");
    assert!(
        err.contains("live cpuset 1 != kubelet state 0"),
        "audit reports g:\n{err}"
    );
    assert!(
        err.contains("live cpuset 0 != kubelet state 1"),
        "audit reports b:\n{err}"
    );
    assert_eq!(cpuset(&env, &g), "1", "audit changes nothing");
    assert_eq!(cpuset(&env, &b), "0", "audit changes nothing");

    // 2. drift: someone puts the Burstable container back on every CPU.
    let client = env.client().await;
    client
        .update_container_resources(
            &b.containers[0].1,
            proto::LinuxContainerResources {
                cpuset_cpus: "0-1".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cpuset(&env, &b), "0-1");
    run_once(&env, &state_dir);
    assert_eq!(cpuset(&env, &b), "0", "drift corrected");

    // 3. a restart keeps the assignment; a second 1-CPU Guaranteed pod does
    // not fit (CPU 0 is reserved) and stays on the shared pool.
    let g2 = env
        .run_pod(
            &PodSpec::new("g2").container(
                ContainerSpec::pause("app")
                    .cpu(Some(1000), Some(1000))
                    .memory(Some(32 * MI), Some(32 * MI)),
            ),
        )
        .await;
    let log = run_once(&env, &state_dir);
    assert_eq!(cpuset(&env, &g), "1", "assignment kept across the restart");
    assert_eq!(cpuset(&env, &g2), "0", "refused pod stays shared");
    assert!(
        log.contains("not enough cpus available to satisfy request"),
        "the kubelet's refusal is logged:\n{log}"
    );
    assert_eq!(state(&state_dir).get(&g2.spec.uid, "app"), None);

    // 4. the pod goes: its CPU is released. g2, refused while the node was
    // full, is retried every pass and now gets CPU 1.
    env.remove_pod(&g).await;
    run_once(&env, &state_dir);
    let st = state(&state_dir);
    assert_eq!(st.get(&g.spec.uid, "app"), None, "released");
    assert_eq!(
        st.get(&g2.spec.uid, "app")
            .map(|s| s.to_string())
            .as_deref(),
        Some("1")
    );
    assert_eq!(cpuset(&env, &g2), "1");
    assert_eq!(cpuset(&env, &b), "0");

    // 5. the last exclusive pod goes: the shared pool is every CPU again.
    env.remove_pod(&g2).await;
    run_once(&env, &state_dir);
    let st = state(&state_dir);
    assert_eq!(st.default.to_string(), "0-1");
    assert!(st.entries.is_empty(), "{st:?}");
    assert_eq!(cpuset(&env, &b), "0-1", "the shared pool grew back");
}
