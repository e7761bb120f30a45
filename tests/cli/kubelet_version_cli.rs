//! Issue 16 at the command line: `--kubelet-version` and the other new
//! settings are validated (exit 2, nothing written), hugepage manifests are
//! checked like the API server does, and `qosd run` refuses a missing
//! reserved cgroup without creating it (a private fake cgroupfs in a temp
//! dir: the check happens before any write).

use crate::support::*;
use predicates::prelude::*;

/// With the shared plan node: no hugepage sizes.
const NO_HUGEPAGES: &[&str] = &["--hugepage-sizes", "none"];

#[test]
fn bad_settings_exit_2() {
    for (args, msg) in [
        (&["--kubelet-version", "1.37"][..], "1.33, 1.34, 1.35, 1.36"),
        (
            &["--memory-reservation-policy", "Hard"][..],
            "TieredReservation",
        ),
        (
            &["--enforce-node-allocatable", "pods,all"][..],
            "unknown key",
        ),
        (
            &["--enforce-node-allocatable", "pods,kube-reserved"][..],
            "kubeReservedCgroup is not set",
        ),
        (&["--hugepage-sizes", "3Mx"][..], "--hugepage-sizes"),
        (
            &["--memory-throttling-factor", "1.5"][..],
            "memoryThrottlingFactor (from command-line flag): invalid value \"1.5\"",
        ),
    ] {
        qosd_cmd()
            .arg("plan")
            .args(NODE_4CPU_8GI_V2)
            .args(NO_HUGEPAGES)
            .args(args)
            .assert()
            .code(2)
            .stdout("")
            .stderr(predicate::str::contains(msg));
    }
}

#[test]
fn version_is_printed_and_accepted_in_kubelet_spellings() {
    for (given, shown) in [("v1.34.2", "1.34"), ("1.33", "1.33"), ("1.36", "1.36")] {
        qosd_cmd()
            .arg("plan")
            .args(NODE_4CPU_8GI_V2)
            .args(NO_HUGEPAGES)
            .args(["--kubelet-version", given])
            .assert()
            .success()
            .stdout(predicate::str::starts_with(format!(
                "rules: kubelet {shown}\n"
            )));
    }
    qosd_cmd()
        .arg("plan")
        .args(NODE_4CPU_8GI_V2)
        .args(NO_HUGEPAGES)
        .assert()
        .success()
        .stdout(predicate::str::starts_with("rules: kubelet 1.36\n"));
}

#[test]
fn hugepage_manifests_are_validated() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("hp.yaml");
    std::fs::write(
        &f,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: hp}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests: {memory: 1Gi, hugepages-2Mi: 4Mi}\n      limits: {memory: 1Gi, hugepages-2Mi: 6Mi}\n",
    )
    .unwrap();
    qosd_cmd()
        .arg("plan")
        .args(NODE_4CPU_8GI_V2)
        .args(NO_HUGEPAGES)
        .arg("--pods")
        .arg(&f)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "spec.containers[0].resources.requests.hugepages-2Mi: hugepages request 4Mi must equal the limit 6Mi",
        ));
}

#[test]
fn run_refuses_a_missing_reserved_cgroup_and_creates_nothing() {
    let cg = tempfile::tempdir().unwrap();
    std::fs::write(cg.path().join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    let before: Vec<_> = std::fs::read_dir(cg.path()).unwrap().flatten().collect();
    qosd_cmd()
        .args(["run", "--once", "--pods", "fixtures/pods/01-qos-demo.yaml"])
        .args(["--cgroupfs", cg.path().to_str().unwrap()])
        .args([
            "--cgroup-version",
            "v2",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
        ])
        .args(["--enforce-node-allocatable", "pods,system-reserved"])
        .args(["--system-reserved-cgroup", "/system.slice"])
        .args(["--system-reserved", "cpu=500m,memory=1Gi"])
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "systemReservedCgroup \"/system.slice\" does not exist",
        ))
        .stderr(predicate::str::contains("never creates it"));
    let after: Vec<_> = std::fs::read_dir(cg.path()).unwrap().flatten().collect();
    assert_eq!(
        before.len(),
        after.len(),
        "nothing created under the cgroupfs"
    );
}
