//! Golden tests of `qosd plan` / `qosd classify` output over fixtures/pods.
//!
//! Compare against tests/golden/*; regenerate with `UPDATE_GOLDEN=1 cargo test --test cli plan_golden::`.

use std::path::{Path, PathBuf};

use assert_cmd::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden(name: &str, args: &[&str]) {
    let out = Command::cargo_bin("qosd")
        .unwrap()
        .current_dir(root())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "qosd {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    if name.ends_with(".json") {
        check_plan_shape(&got, name);
    }
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run UPDATE_GOLDEN=1 cargo test --test cli plan_golden::)",
            path.display()
        )
    });
    if got != want {
        let first = got
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(got.lines().count().min(want.lines().count()));
        panic!(
            "{} differs from `qosd {}` at line {}:\n  want: {:?}\n  got:  {:?}\n(if the change is intended: UPDATE_GOLDEN=1 cargo test --test cli plan_golden::)",
            path.display(),
            args.join(" "),
            first + 1,
            want.lines().nth(first),
            got.lines().nth(first)
        );
    }
}

/// The JSON contract of issue 2 (keys and types), for plan and classify.
fn check_plan_shape(text: &str, name: &str) {
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    let pods = v["pods"]
        .as_array()
        .unwrap_or_else(|| panic!("{name}: no pods"));
    assert!(!pods.is_empty());
    for p in pods {
        for k in ["uid", "namespace", "name", "qos_class"] {
            assert!(p[k].is_string(), "{name}: pod.{k}");
        }
        assert!(
            ["Guaranteed", "Burstable", "BestEffort"].contains(&p["qos_class"].as_str().unwrap())
        );
    }
    if name.starts_with("classify") {
        return;
    }
    for k in ["cpu_millis", "memory_bytes"] {
        assert!(v["node"][k].is_i64(), "{name}: node.{k}");
    }
    assert!(["v1", "v2"].contains(&v["node"]["cgroup_version"].as_str().unwrap()));
    assert!(["cgroupfs", "systemd"].contains(&v["node"]["cgroup_driver"].as_str().unwrap()));
    for p in pods {
        assert!(p["cgroup"].is_string());
    }
    let writes = v["writes"].as_array().unwrap();
    assert!(!writes.is_empty());
    for w in writes {
        assert!(w["file"].as_str().unwrap().starts_with('/'), "{name}: {w}");
        assert!(w["value"].is_string(), "{name}: {w}");
    }
}

const NODE: &[&str] = &[
    "--node-cpu",
    "8",
    "--node-memory",
    "32Gi",
    "--cgroupfs",
    "/sys/fs/cgroup",
    "--hugepage-sizes",
    "none",
];

fn plan_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["plan", "--pods", "fixtures/pods"];
    v.extend_from_slice(NODE);
    v.extend_from_slice(extra);
    v
}

#[test]
fn plan_json_v1_cgroupfs() {
    golden(
        "plan.v1-cgroupfs.json",
        &plan_args(&[
            "--cgroup-version",
            "v1",
            "--cgroup-driver",
            "cgroupfs",
            "--output",
            "json",
        ]),
    );
}

#[test]
fn plan_json_v1_systemd() {
    golden(
        "plan.v1-systemd.json",
        &plan_args(&[
            "--cgroup-version",
            "v1",
            "--cgroup-driver",
            "systemd",
            "--output",
            "json",
        ]),
    );
}

#[test]
fn plan_json_v2_cgroupfs() {
    golden(
        "plan.v2-cgroupfs.json",
        &plan_args(&[
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "cgroupfs",
            "--output",
            "json",
        ]),
    );
}

#[test]
fn plan_json_v2_systemd() {
    golden(
        "plan.v2-systemd.json",
        &plan_args(&[
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "systemd",
            "--output",
            "json",
        ]),
    );
}

#[test]
fn plan_json_v2_all_options() {
    golden(
        "plan.v2-systemd-options.json",
        &plan_args(&[
            "--cgroup-version",
            "v2",
            "--cgroup-driver",
            "systemd",
            "--cgroup-root",
            "/qosd-test",
            "--system-reserved",
            "cpu=500m,memory=1Gi",
            "--kube-reserved",
            "cpu=500m,memory=512Mi",
            "--qos-reserved",
            "memory=50%",
            "--memory-qos",
            "--cpu-weight-formula",
            "runc",
            "--pod-max-pids",
            "1024",
            "--output",
            "json",
        ]),
    );
}

#[test]
fn plan_json_v1_reserved() {
    golden(
        "plan.v1-cgroupfs-reserved.json",
        &plan_args(&[
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            "/qosd-test",
            "--system-reserved",
            "cpu=1,memory=2Gi",
            "--qos-reserved",
            "memory=100%",
            "--cpu-cfs-quota-period",
            "50ms",
            "--output",
            "json",
        ]),
    );
}

/// Per kubelet version (issue 16): fixtures/pods plus fixtures/versioned
/// (hugepages, an init container without limits after a sidecar with them,
/// a memory request without a limit), on a node offering 2Mi and 1Gi pages.
fn versioned_args<'a>(version: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "plan",
        "--pods",
        "fixtures/pods",
        "fixtures/versioned",
        "--node-cpu",
        "8",
        "--node-memory",
        "32Gi",
        "--cgroupfs",
        "/sys/fs/cgroup",
        "--hugepage-sizes",
        "2Mi,1Gi",
        "--kubelet-version",
        version,
        "--output",
        "json",
    ];
    v.extend_from_slice(extra);
    v
}

const MEMORY_QOS_V2: &[&str] = &[
    "--cgroup-version",
    "v2",
    "--cgroup-driver",
    "systemd",
    "--memory-qos",
    "--system-reserved",
    "cpu=500m,memory=1Gi,pid=1000",
    "--kube-reserved",
    "cpu=500m,memory=512Mi,hugepages-2Mi=4Mi",
    "--enforce-node-allocatable",
    "pods,system-reserved,kube-reserved",
    "--system-reserved-cgroup",
    "/system.slice",
    "--kube-reserved-cgroup",
    "/kube.slice",
];

#[test]
fn plan_versioned_1_33_v1() {
    golden(
        "plan.1.33.v1-cgroupfs.json",
        &versioned_args("1.33", &["--cgroup-version", "v1"]),
    );
}

#[test]
fn plan_versioned_1_34_v2() {
    golden(
        "plan.1.34.v2-memoryqos-reserved.json",
        &versioned_args("1.34", MEMORY_QOS_V2),
    );
}

#[test]
fn plan_versioned_1_35_v2() {
    golden(
        "plan.1.35.v2-memoryqos-reserved.json",
        &versioned_args("1.35", MEMORY_QOS_V2),
    );
}

#[test]
fn plan_versioned_1_36_v2_none() {
    golden(
        "plan.1.36.v2-memoryqos-reserved.json",
        &versioned_args("1.36", MEMORY_QOS_V2),
    );
}

#[test]
fn plan_versioned_1_36_v2_tiered() {
    let mut extra = MEMORY_QOS_V2.to_vec();
    extra.extend(["--memory-reservation-policy", "TieredReservation"]);
    golden(
        "plan.1.36.v2-memoryqos-tiered.json",
        &versioned_args("1.36", &extra),
    );
}

#[test]
fn plan_versioned_1_36_v1_text() {
    let mut args = versioned_args("1.36", &["--cgroup-version", "v1"]);
    let at = args.iter().position(|a| *a == "json").unwrap();
    args[at] = "text";
    golden("plan.1.36.v1-cgroupfs.txt", &args);
}

#[test]
fn plan_text_v2_cgroupfs() {
    golden(
        "plan.v2-cgroupfs.txt",
        &plan_args(&["--cgroup-version", "v2", "--output", "text"]),
    );
}

#[test]
fn classify_json() {
    golden(
        "classify.json",
        &["classify", "--pods", "fixtures/pods", "--output", "json"],
    );
}

#[test]
fn classify_text() {
    golden("classify.txt", &["classify", "--pods", "fixtures/pods"]);
}

#[test]
fn embedded_examples_equal_the_fixture_directory() {
    let run = |extra: &[&str]| {
        let mut args = vec!["plan", "--cgroup-version", "v2", "--output", "json"];
        args.extend_from_slice(NODE);
        args.extend_from_slice(extra);
        let out = Command::cargo_bin("qosd")
            .unwrap()
            .current_dir(root())
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let embedded = run(&[]);
    let from_dir = run(&["--pods", "fixtures/pods"]);
    assert_eq!(embedded, from_dir);
}

#[test]
fn golden_files_exist_for_every_case() {
    // Guards against a silently skipped golden (e.g. a renamed file).
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        return;
    }
    for f in [
        "plan.v1-cgroupfs.json",
        "plan.v1-systemd.json",
        "plan.v2-cgroupfs.json",
        "plan.v2-systemd.json",
        "plan.v2-systemd-options.json",
        "plan.v1-cgroupfs-reserved.json",
        "plan.v2-cgroupfs.txt",
        "plan.1.33.v1-cgroupfs.json",
        "plan.1.34.v2-memoryqos-reserved.json",
        "plan.1.35.v2-memoryqos-reserved.json",
        "plan.1.36.v2-memoryqos-reserved.json",
        "plan.1.36.v2-memoryqos-tiered.json",
        "plan.1.36.v1-cgroupfs.txt",
        "classify.json",
        "classify.txt",
    ] {
        assert!(
            Path::new(&root().join("tests/golden").join(f)).is_file(),
            "{f}"
        );
    }
}
