//! CLI behaviour of `qosd plan` / `qosd classify`: bad input exits 2 with
//! the file and field in the message and nothing on stdout; flags map to
//! the plan.

use crate::support::*;
use predicates::prelude::*;

const NODE: &[&str] = NODE_4CPU_8GI_V2;

#[test]
fn bad_manifests_exit_2_naming_file_and_field() {
    let cases = [
        (
            "fixtures/bad/bad-quantity.yaml",
            "fixtures/bad/bad-quantity.yaml: spec.containers[0].resources.limits.cpu: invalid quantity \"1.2.3\"",
        ),
        (
            "fixtures/bad/bad-suffix.yaml",
            "fixtures/bad/bad-suffix.yaml: spec.containers[0].resources.requests.memory: invalid quantity \"10Qi\"",
        ),
        (
            "fixtures/bad/wrong-type.yaml",
            "fixtures/bad/wrong-type.yaml: spec.containers: expected a list, got a mapping",
        ),
        (
            "fixtures/bad/request-over-limit.yaml",
            "fixtures/bad/request-over-limit.yaml: spec.containers[0].resources.requests.memory: request 2Gi must be less than or equal to the memory limit 1Gi",
        ),
        ("fixtures/bad/not-yaml.yaml", "fixtures/bad/not-yaml.yaml: invalid YAML"),
        (
            "fixtures/bad/bad-in-list.json",
            "fixtures/bad/bad-in-list.json: items[1].spec.containers[0].resources.requests.cpu: expected a quantity (string or number), got a boolean",
        ),
        ("fixtures/bad/missing.yaml", "fixtures/bad/missing.yaml: cannot read"),
    ];
    for (file, message) in cases {
        for cmd in ["plan", "classify"] {
            let mut args = vec![cmd, "--pods", "fixtures/pods", file, "--output", "json"];
            if cmd == "plan" {
                args.extend_from_slice(NODE);
            }
            qosd_cmd()
                .args(&args)
                .assert()
                .code(2)
                .stdout(predicate::str::is_empty())
                .stderr(predicate::str::contains(message));
        }
    }
}

#[test]
fn bad_flags_exit_2() {
    for extra in [
        &["--node-cpu", "1.2.3"][..],
        &["--node-memory", "10Qi"][..],
        &["--system-reserved", "cpu=abc"][..],
        &["--qos-reserved", "memory=150%"][..],
        &["--cgroup-version", "v3"][..],
        &["--cpu-cfs-quota-period", "forever"][..],
    ] {
        let mut args = vec!["plan", "--node-cpu", "4", "--node-memory", "8Gi"];
        args.extend_from_slice(extra);
        qosd_cmd()
            .args(&args)
            .assert()
            .code(2)
            .stdout(predicate::str::is_empty());
    }
}

#[test]
fn plan_without_pods_uses_the_embedded_examples() {
    qosd_cmd()
        .args([
            "plan",
            "--node-cpu",
            "2",
            "--node-memory",
            "4Gi",
            "--cgroup-version",
            "v1",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains("qos-example/qos-demo  Guaranteed"))
        .stdout(predicate::str::contains(
            "/sys/fs/cgroup/cpu/kubepods/cpu.shares = 2048",
        ))
        .stderr(predicate::str::contains("embedded example pods"));
}

#[test]
fn plan_detects_the_node_and_version_by_default() {
    // No flags at all: the README's first command. Works on any machine
    // (falls back to v2 with a warning when /sys/fs/cgroup is not a cgroupfs).
    let out = qosd_cmd()
        .args(["plan", "--output", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["node"]["cpu_millis"].as_i64().unwrap() >= 1000);
    assert!(v["node"]["memory_bytes"].as_i64().unwrap() > 0);
}

#[test]
fn fake_proc_and_cgroupfs() {
    let d = tempfile::tempdir().unwrap();
    let proc_ = d.path().join("proc");
    std::fs::create_dir(&proc_).unwrap();
    std::fs::write(proc_.join("meminfo"), "MemTotal: 4194304 kB\n").unwrap();
    std::fs::write(proc_.join("cpuinfo"), "processor : 0\nprocessor : 1\n").unwrap();
    let cg = d.path().join("cgroup");
    std::fs::create_dir(&cg).unwrap();
    std::fs::write(cg.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    let out = qosd_cmd()
        .args([
            "plan",
            "--pods",
            "fixtures/pods/01-qos-demo.yaml",
            "--output",
            "json",
        ])
        .arg("--proc-root")
        .arg(&proc_)
        .arg("--cgroupfs")
        .arg(&cg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["node"]["cpu_millis"], 2000);
    assert_eq!(v["node"]["memory_bytes"], 4i64 << 30);
    assert_eq!(v["node"]["cgroup_version"], "v2");
    let first = v["writes"][0]["file"].as_str().unwrap();
    assert_eq!(first, cg.join("kubepods/cpu.weight").to_str().unwrap());
    // dry run: nothing was created under the fake cgroupfs
    assert!(!cg.join("kubepods").exists());
}

#[test]
fn cri_without_runtime_is_a_runtime_failure() {
    qosd_cmd()
        .args([
            "plan",
            "--cri",
            "--runtime-endpoint",
            "unix:///nonexistent/qosd-test.sock",
        ])
        .args(NODE)
        .assert()
        .code(1)
        .stdout(predicate::str::is_empty());
    qosd_cmd()
        .args(["plan", "--cri", "--pods", "fixtures/pods"])
        .assert()
        .code(2);
}

#[test]
fn classify_says_why() {
    qosd_cmd()
        .args([
            "classify",
            "--pods",
            "fixtures/pods/02-qos-demo-2.yaml",
            "fixtures/pods/13-no-uid.yaml",
            "--output",
            "json",
        ])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "\"reason\": \"container qos-demo-2-ctr: memory request 100Mi != limit 200Mi\"",
        ))
        .stdout(predicate::str::contains("\"uid_derived\": true"));
}

#[test]
fn huge_cpu_limits_plan_the_kernels_largest_quota() {
    let tmp = tempfile::tempdir().unwrap();
    for (i, limit) in ["9Ei", "1e21"].into_iter().enumerate() {
        let file = tmp.path().join(format!("huge-{i}.yaml"));
        std::fs::write(
            &file,
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: huge, namespace: default, uid: 00000000-0000-0000-0000-00000000000{i}}}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits: {{cpu: \"{limit}\", memory: 1Gi}}\n"
            ),
        )
        .unwrap();
        let file = file.to_str().unwrap();
        let v1 = qosd_cmd()
            .args([
                "plan",
                "--pods",
                file,
                "--node-cpu",
                "4",
                "--node-memory",
                "8Gi",
            ])
            .args(["--cgroup-version", "v1"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&v1.stdout);
        assert!(
            v1.status.success(),
            "{limit}: {out}{}",
            String::from_utf8_lossy(&v1.stderr)
        );
        assert!(
            out.contains("cpu.cfs_quota_us = 17592186044415"),
            "{limit}: {out}"
        );
        assert!(out.contains("cpu.shares = 262144"), "{limit}: {out}");
        assert!(!out.contains("9223372036854775807"), "{limit}: {out}");
        let v2 = qosd_cmd()
            .args([
                "plan",
                "--pods",
                file,
                "--node-cpu",
                "4",
                "--node-memory",
                "8Gi",
            ])
            .args(["--cgroup-version", "v2"])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&v2.stdout);
        assert!(v2.status.success(), "{limit}: {out}");
        assert!(
            out.contains("cpu.max = 17592186044415 100000"),
            "{limit}: {out}"
        );
        assert!(out.contains("cpu.weight = 10000"), "{limit}: {out}");
    }
}

#[test]
fn reservations_summing_past_i64_exit_2_in_check_and_plan() {
    // 5e15 CPUs = 5e18 millicores each: the sum is past 2^63-1.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("qosd.yaml");
    std::fs::write(
        &cfg,
        "systemReserved: {cpu: \"5e15\"}\nkubeReserved: {cpu: \"5e15\"}\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    for args in [
        vec!["config", "check", cfg],
        vec![
            "plan",
            "--config",
            cfg,
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
        ],
        vec![
            "run",
            "--once",
            "--config",
            cfg,
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
        ],
    ] {
        let out = qosd_cmd().args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("systemReserved + kubeReserved"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("overflow"), "{args:?}: {err}");
    }
}

fn plan_json(pods: &[&str]) -> serde_json::Value {
    let mut args = vec!["plan", "--output", "json", "--pods"];
    args.extend_from_slice(pods);
    args.extend_from_slice(NODE);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 0, "{err}");
    check_contract("plan", &out);
    serde_json::from_str(&out).unwrap()
}

/// The kubelet's oom_score_adj per container (8Gi node): a sidecar is
/// capped at the smallest app container's value, a small init container
/// clamps to 999, Guaranteed and BestEffort take their fixed values.
#[test]
fn plan_json_has_each_containers_oom_score_adj() {
    let v = plan_json(&[
        "fixtures/pods/07-sidecar.yaml",
        "fixtures/pods/01-qos-demo.yaml",
    ]);
    let adjs = |i: usize| -> Vec<(String, bool, i64)> {
        v["pods"][i]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["init"].as_bool().unwrap(),
                    c["oom_score_adj"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    // app 256Mi: 1000 - 31 = 969; proxy 64Mi would be 993, capped at 969;
    // wait-for-db 16Mi: 1000 - 1 = 999.
    assert_eq!(
        adjs(0),
        [
            ("app".to_string(), false, 969),
            ("proxy".to_string(), true, 969),
            ("wait-for-db".to_string(), true, 999),
        ]
    );
    let class = v["pods"][1]["qos_class"].as_str().unwrap();
    let want = match class {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        other => panic!("01-qos-demo is {other}"),
    };
    assert!(adjs(1).iter().all(|(_, _, a)| *a == want), "{:?}", adjs(1));
}

#[test]
fn plan_wide_shows_oom_score_adj_and_text_does_not() {
    let mut args = vec![
        "plan",
        "--pods",
        "fixtures/pods/07-sidecar.yaml",
        "-o",
        "wide",
    ];
    args.extend_from_slice(NODE);
    let (code, wide, err) = qosd(&args);
    assert_eq!(code, 0, "{err}");
    assert!(
        wide.contains("  oom_score_adj: app=969 init:proxy=969 init:wait-for-db=999\n"),
        "{wide}"
    );
    args[4] = "text";
    let (code, text, err) = qosd(&args);
    assert_eq!(code, 0, "{err}");
    assert!(!text.contains("oom_score_adj"), "{text}");
    assert_eq!(
        wide.replace(
            "  oom_score_adj: app=969 init:proxy=969 init:wait-for-db=999\n",
            ""
        ),
        text
    );
}

/// An empty pod set (a directory or a file without a pod) is an empty
/// node: the node- and QoS-level writes, exit 0, a note on stderr.
#[test]
fn plan_of_an_empty_node_prints_node_and_qos_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let empty_file = tmp.path().join("none.yaml");
    std::fs::write(&empty_file, "# no pods here\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    for path in [dir.path(), empty_file.as_path()] {
        let p = path.to_str().unwrap();
        let v = plan_json(&[p]);
        assert_eq!(v["pods"].as_array().unwrap().len(), 0);
        let files: Vec<&str> = v["writes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["file"].as_str().unwrap())
            .collect();
        assert!(
            files.iter().any(|f| f.contains("/kubepods/burstable/")),
            "{p}: {files:?}"
        );
        assert!(
            files.iter().any(|f| f.contains("/kubepods/besteffort/")),
            "{p}: {files:?}"
        );
        assert!(
            files.iter().any(|f| f.ends_with("/kubepods/memory.max")),
            "{p}: {files:?}"
        );
        let mut args = vec!["plan", "--pods", p];
        args.extend_from_slice(NODE);
        let (code, text, err) = qosd(&args);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("planning an empty node"), "{err}");
        assert!(text.contains("node and QoS level:"), "{text}");
    }
}
