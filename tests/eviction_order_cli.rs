//! `qosd eviction-order` end to end (manifests + usage file).
//! The ranking cases need the core branch (manifest loader, classifier);
//! the input-error cases run on their own.

use assert_cmd::Command;
use std::path::PathBuf;

fn fixture(p: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/eviction")
        .join(p)
}

fn qosd() -> Command {
    Command::cargo_bin("qosd").unwrap()
}

fn order_json(signal: &str) -> serde_json::Value {
    let out = qosd()
        .args([
            "eviction-order",
            "--signal",
            signal,
            "--output",
            "json",
            "--pods",
        ])
        .arg(fixture("pods.yaml"))
        .arg("--usage")
        .arg(fixture("usage.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v["order"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn memory_order_from_manifests() {
    let v = order_json("memory.available");
    assert_eq!(v["signal"], "memory.available");
    // besteffort exceeds its zero request by 300Mi, burstable-over its 100Mi by 250Mi,
    // guaranteed stays within its request.
    assert_eq!(names(&v), ["besteffort", "burstable-over", "guaranteed"]);
    assert_eq!(v["order"][0]["qos_class"], "BestEffort");
    assert_eq!(v["order"][1]["request_bytes"], 100 * 1024 * 1024);
    assert_eq!(v["order"][2]["qos_class"], "Guaranteed");
    let never: Vec<&str> = v["never_evicted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["uid"].as_str().unwrap())
        .collect();
    assert_eq!(
        never,
        [
            "11111111-0000-0000-0000-000000000004",
            "11111111-0000-0000-0000-000000000005"
        ]
    );
    assert!(v["never_evicted"][1]["reason"]
        .as_str()
        .unwrap()
        .contains("2000000000"));
}

#[test]
fn pid_and_disk_orders() {
    let v = order_json("pid.available");
    // all priority 0: most processes first
    assert_eq!(names(&v), ["burstable-over", "besteffort", "guaranteed"]);
    let v = order_json("nodefs.available");
    // no ephemeral-storage requests: all exceed; largest usage first
    assert_eq!(names(&v), ["burstable-over", "guaranteed", "besteffort"]);
}

#[test]
fn json_matches_the_contract() {
    let checker = PathBuf::from("/work/shared/contracts/check-json.py");
    if !checker.exists() {
        eprintln!("skipping: {} not present", checker.display());
        return;
    }
    let out = qosd()
        .args(["eviction-order", "--output", "json", "--pods"])
        .arg(fixture("pods.yaml"))
        .arg("--usage")
        .arg(fixture("usage.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let mut child = std::process::Command::new("python3")
        .arg(&checker)
        .arg("eviction-order")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(&out.stdout).unwrap();
    let res = child.wait_with_output().unwrap();
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stdout)
    );
}

#[test]
fn text_output_explains() {
    let out = qosd()
        .args(["eviction-order", "--pods"])
        .arg(fixture("pods.yaml"))
        .arg("--usage")
        .arg(fixture("usage.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("Eviction order for memory.available"), "{s}");
    assert!(s.contains("batch/besteffort"), "{s}");
    assert!(s.contains("Never evicted:"), "{s}");
}

#[test]
fn bad_inputs_exit_2() {
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--signal".into(),
                "memory.free".into(),
                "--pods".into(),
                "x".into(),
            ],
            "unknown eviction signal \"memory.free\"",
        ),
        (vec![], "--pods"),
        (
            vec![
                "--pods".into(),
                fixture("pods.yaml").display().to_string(),
                "--usage".into(),
                "/nonexistent/usage.json".into(),
            ],
            "/nonexistent/usage.json",
        ),
        (
            vec![
                "--pods".into(),
                fixture("pods.yaml").display().to_string(),
                "--usage".into(),
                fixture("pods.yaml").display().to_string(),
            ],
            "usage file",
        ),
    ];
    for (args, want) in cases {
        let out = qosd().arg("eviction-order").args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
