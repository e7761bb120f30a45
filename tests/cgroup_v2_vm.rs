//! Real cgroup v2: qosd's applier and kill paths inside a qemu VM running
//! Debian's 6.1 kernel (tests/vm/, docs/cgroup-v2-vm.md).
//!
//! Skips (with the reason) when qemu, python3 or the kernel download are not
//! available, unless QOSD_VM_REQUIRED=1 (CI), where that is a failure.

#[path = "vm/harness.rs"]
mod vm;

use std::time::Duration;

const SCRIPT: &str = r#"
set -e
echo "qosd: $(qosd --version)"
qosd-vmtest scenario-v2 --root /sys/fs/cgroup

# The generic `apply` command on a JSON plan, twice: the second pass writes nothing.
P=/sys/fs/cgroup/qosd-test-apply
mkdir $P
cat > /tmp/plan.json <<EOF
[{"file": "$P/kubepods/cpu.weight", "value": "79", "level": "node"},
 {"file": "$P/kubepods/burstable/pod1/memory.max", "value": "-1"},
 {"file": "$P/kubepods/burstable/pod1/pids.max", "value": "100"}]
EOF
qosd-vmtest apply --base $P/kubepods --enable-from /sys/fs/cgroup /tmp/plan.json > /tmp/r1.json
qosd-vmtest apply --base $P/kubepods --enable-from /sys/fs/cgroup /tmp/plan.json > /tmp/r2.json
echo "APPLY1 $(cat /tmp/r1.json)" > $VMTEST_RESULTS
echo "APPLY2 $(cat /tmp/r2.json)" > $VMTEST_RESULTS
echo "PIDSMAX $(cat $P/kubepods/burstable/pod1/pids.max)" > $VMTEST_RESULTS
rmdir $P/kubepods/burstable/pod1 $P/kubepods/burstable $P/kubepods $P
"#;

#[test]
fn applier_on_real_cgroup_v2() {
    let bins = match vm::static_bins(&["qosd", "qosd-vmtest"]) {
        Ok(b) => b,
        Err(why) => return vm::skip(&why),
    };
    let run = match vm::run_script(SCRIPT, &bins, &[], Duration::from_secs(240)) {
        vm::VmOutcome::Ran(r) => r,
        vm::VmOutcome::Skipped(why) => return vm::skip(&why),
    };
    let out = &run.output;
    eprintln!("VM run took {:.1}s", run.elapsed.as_secs_f64());
    for m in vm::lines_with(out, "MEASURE ") {
        eprintln!("MEASURE {m}");
    }
    assert_eq!(run.code, 0, "VM script failed:\n{out}");
    assert!(out.contains("SCENARIO v2 PASSED"), "{out}");
    assert!(vm::lines_with(out, "CHECK FAILED").is_empty(), "{out}");
    assert!(vm::lines_with(out, "CHECK ok: ").len() >= 20, "{out}");

    // Structured results come over the clean second serial port.
    let res = &run.results;
    assert!(res.ends_with("VMTEST_EXIT=0\n"), "{res}");
    let r1: serde_json::Value = serde_json::from_str(vm::lines_with(res, "APPLY1 ")[0]).unwrap();
    let r2: serde_json::Value = serde_json::from_str(vm::lines_with(res, "APPLY2 ")[0]).unwrap();
    assert_eq!(r1["writes"].as_array().unwrap().len(), 2, "{r1}"); // memory.max is already max
    assert_eq!(r1["unchanged"], 1, "{r1}");
    assert_eq!(r2["writes"].as_array().unwrap().len(), 0, "{r2}");
    assert_eq!(r2["unchanged"], 3, "{r2}");
    assert_eq!(vm::lines_with(res, "PIDSMAX "), vec!["100"], "{res}");
}
