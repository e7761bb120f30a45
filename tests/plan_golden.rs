//! Golden tests of `qosd plan` / `qosd classify` output over fixtures/pods.
//!
//! Compare against tests/golden/*; regenerate with `UPDATE_GOLDEN=1 cargo test --test plan_golden`.

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
            "{}: {e} (run UPDATE_GOLDEN=1 cargo test --test plan_golden)",
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
            "{} differs from `qosd {}` at line {}:\n  want: {:?}\n  got:  {:?}\n(if the change is intended: UPDATE_GOLDEN=1 cargo test --test plan_golden)",
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
        "classify.json",
        "classify.txt",
    ] {
        assert!(
            Path::new(&root().join("tests/golden").join(f)).is_file(),
            "{f}"
        );
    }
}
