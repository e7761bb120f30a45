//! `qosd plan --cpu-manager-policy static` on the fake sysfs trees in
//! fixtures/sysfs (shaped like real machines): the kubelet's assignment,
//! the JSON shape, and the start-up refusals (exit code 2).

use crate::support::qosd;
use serde_json::Value;

fn plan(extra: &[&str]) -> (i32, String, String) {
    plan_with_policy("static", extra)
}

/// `qosd plan` of fixtures/cpu-pods on a 32-CPU v2 node with CPU manager
/// policy `policy`.
fn plan_with_policy(policy: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "plan",
        "--pods",
        "fixtures/cpu-pods",
        "--cgroup-version",
        "v2",
        "--node-cpu",
        "32",
        "--node-memory",
        "64Gi",
        "--cpu-manager-policy",
        policy,
    ];
    args.extend_from_slice(extra);
    qosd(&args)
}

fn cpusets(out: &str) -> (Vec<(String, String, bool)>, String) {
    let v: Value = serde_json::from_str(out).unwrap();
    let list = v["cpusets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                format!(
                    "{}/{}",
                    c["pod"].as_str().unwrap(),
                    c["container"].as_str().unwrap()
                ),
                c["cpus"].as_str().unwrap().to_string(),
                c["exclusive"].as_bool().unwrap(),
            )
        })
        .collect();
    (list, v["shared_pool"].as_str().unwrap().to_string())
}

#[test]
fn two_socket_ht_with_an_odd_reserved_set() {
    // 2 sockets x 8 cores x 2 threads (core c = {c, c+16}); reserved 0 and
    // 17 are halves of two different cores.
    let (code, out, err) = plan(&[
        "--reserved-cpus",
        "0,17",
        "--sysfs",
        "fixtures/sysfs/2s-8c-2t",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let (sets, shared) = cpusets(&out);
    let get = |k: &str| sets.iter().find(|s| s.0 == k).unwrap().clone();
    // latency: 2 CPUs = the first whole free core on the fuller socket 0:
    // core 0 and core 1 are half reserved, so core 2 = {2,18}.
    assert_eq!(
        get("default/latency/app"),
        ("default/latency/app".into(), "2,18".into(), true)
    );
    // batch: init container takes 4 (two whole cores), main reuses 3 of them.
    let setup = get("default/batch/setup");
    let main = get("default/batch/main");
    assert_eq!(setup.1, "3-4,19-20");
    // (the free half of core 0, 16, is taken before breaking a whole core)
    assert_eq!(main.1, "3,16,19");
    assert!(setup.2 && main.2);
    // fractional and Burstable containers share the pool
    assert!(!get("default/batch/helper").2);
    assert_eq!(
        get("default/web/app"),
        ("default/web/app".into(), shared.clone(), false)
    );
    assert_eq!(shared, "0-1,5-15,17,21-31");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cpu_manager"]["reserved"], "0,17");
    assert!(
        v["writes"].as_array().is_some_and(|w| !w.is_empty()),
        "the cgroup plan is still there"
    );
}

#[test]
fn numa_nodes_and_reservation_from_kube_reserved() {
    // 2 sockets x 2 NUMA nodes x 4 cores x 2 threads; kube-reserved 1500m
    // → 2 CPUs = core 0 ({0,16}).
    let (code, out, err) = plan(&[
        "--kube-reserved",
        "cpu=1500m",
        "--sysfs",
        "fixtures/sysfs/2s-2n-4c-2t",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["cpu_manager"]["reserved"], "0,16");
    let (sets, _) = cpusets(&out);
    // latency: NUMA node 0 is the fullest: core 1 = {1,17}.
    assert_eq!(sets[0].1, "1,17");
}

#[test]
fn full_pcpus_only_refuses_odd_requests_with_the_kubelet_error() {
    let mut pods = std::env::temp_dir();
    pods.push(format!("qosd-cpu-odd-{}.yaml", std::process::id()));
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: odd, uid: 00000000-0000-4000-8000-0000000000aa}\nspec:\n  containers:\n  - name: app\n    resources:\n      limits: {cpu: \"3\", memory: 64Mi}\n",
    )
    .unwrap();
    let (code, out, err) = qosd(&[
        "plan",
        "--pods",
        pods.to_str().unwrap(),
        "--cgroup-version",
        "v2",
        "--node-cpu",
        "8",
        "--node-memory",
        "8Gi",
        "--cpu-manager-policy",
        "static",
        "--reserved-cpus",
        "0,4",
        "--cpu-manager-policy-options",
        "full-pcpus-only=true",
        "--sysfs",
        "fixtures/sysfs/1s-4c-2t",
    ]);
    std::fs::remove_file(&pods).ok();
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("refused: default/odd app: SMT Alignment Error: requested 3 cpus not multiple cpus per core = 2"),
        "{out}"
    );
    assert!(out.contains("default/odd  app  cpus=0-7  shared"), "{out}");
}

#[test]
fn start_up_refusals_are_bad_input() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--sysfs", "fixtures/sysfs/1s-4c-2t"],
            "unable to determine reserved CPU resources for static policy",
        ),
        (
            &[
                "--sysfs",
                "fixtures/sysfs/1s-4c-2t",
                "--kube-reserved",
                "cpu=0",
            ],
            "requires systemreserved.cpu + kubereserved.cpu to be greater than zero",
        ),
        (
            &["--sysfs", "fixtures/sysfs/1s-4c-2t", "--reserved-cpus", "9"],
            "unknown CPU ID: 9",
        ),
        (
            &[
                "--sysfs",
                "fixtures/sysfs/1s-4c-2t",
                "--reserved-cpus",
                "0",
                "--cpu-manager-policy-options",
                "bogus=true",
            ],
            "unknown CPU Manager Policy option: \"bogus\"",
        ),
        (
            &[
                "--sysfs",
                "fixtures/sysfs/no-numa-2s-2c",
                "--reserved-cpus",
                "0",
                "--cpu-manager-policy-options",
                "align-by-socket=true",
            ],
            "Align by socket is not compatible",
        ),
        (&["--reserved-cpus", "1-"], "invalid CPU list"),
    ];
    for (extra, want) in cases {
        let (code, out, err) = plan(extra);
        assert_eq!(code, 2, "{extra:?}: {out}{err}");
        assert!(err.contains(want), "{extra:?}: {err}");
    }
}

/// The kubelet refuses any policy option with the `none` policy
/// (policy_none.go `NewNonePolicy`); so does `qosd plan`.
#[test]
fn options_with_the_none_policy_are_refused_like_the_kubelet() {
    for (opts, want) in [
        (
            "full-pcpus-only=true",
            "None policy: received unsupported options=map[full-pcpus-only:true]",
        ),
        (
            "full-pcpus-only=true,align-by-socket=false",
            "None policy: received unsupported options=map[align-by-socket:false full-pcpus-only:true]",
        ),
    ] {
        let (code, out, err) =
            plan_with_policy("none", &["--cpu-manager-policy-options", opts]);
        assert_eq!(code, 2, "{opts}: {out}");
        assert!(out.is_empty(), "{opts}: {out}");
        assert!(err.contains(want), "{opts}: {err}");
    }
}
