//! `qosd eviction-order` end to end (manifests + usage file).
//! The ranking cases run the manifest loader and the classifier;
//! the input-error cases run on their own.

use crate::support;

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
    // The count is `usage`; `usage_bytes` stays bytes (the memory working set).
    assert_eq!(v["usage_unit"], "processes");
    for e in v["order"].as_array().unwrap() {
        assert_eq!(e["usage"], e["processes"], "{e}");
        assert_eq!(e["usage_bytes"], e["memory_working_set_bytes"], "{e}");
    }
    support::check_contract("eviction-order", &v.to_string());
    let v = order_json("nodefs.available");
    // no ephemeral-storage requests: all exceed; largest usage first
    assert_eq!(names(&v), ["burstable-over", "guaranteed", "besteffort"]);
}

#[test]
fn json_matches_the_contract() {
    let out = qosd()
        .args(["eviction-order", "--output", "json", "--pods"])
        .arg(fixture("pods.yaml"))
        .arg("--usage")
        .arg(fixture("usage.json"))
        .output()
        .unwrap();
    assert!(out.status.success());
    support::check_contract("eviction-order", &String::from_utf8(out.stdout).unwrap());
}

/// qosd's pressure signals: the pods that stall first (their own memory
/// stall at least a quarter of the worst evictable pod's), then the memory
/// order; a protected pod's stall does not count. With the kubelet's
/// signal the same usage ranks by memory alone.
#[test]
fn pressure_order_puts_the_stalling_pod_first() {
    let run = |signal: &str| -> serde_json::Value {
        let out = qosd()
            .args(["eviction-order", "--signal", signal, "-o", "json", "--pods"])
            .arg(fixture("pods.yaml"))
            .arg("--usage")
            .arg(fixture("usage-stall.json"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    for signal in ["memory.full", "memory.some"] {
        let v = run(signal);
        assert_eq!(v["signal"], signal);
        assert_eq!(v["usage_unit"], "bytes");
        assert_eq!(
            names(&v),
            ["guaranteed", "besteffort", "burstable-over"],
            "{v}"
        );
        assert_eq!(v["order"][0]["memory_stall_ppm"], 620_000);
        let why = v["order"][0]["reason"].as_str().unwrap();
        assert!(why.starts_with("stalling on memory 62%"), "{why}");
        assert!(v["order"][2]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not stalling"));
    }
    let v = run("memory.available");
    assert_eq!(names(&v), ["besteffort", "burstable-over", "guaranteed"]);
    // an unknown signal names both kinds
    let out = qosd()
        .args(["eviction-order", "--signal", "memory.stall", "--pods"])
        .arg(fixture("pods.yaml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("memory.stall") && err.contains("memory.full"),
        "{err}"
    );
}
