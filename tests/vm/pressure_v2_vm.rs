//! `qosd run` evicting on memory stall (pressure stall information) on a
//! real cgroup v2 kernel, in the qemu VM of tests/vm/ (Debian's 6.1
//! kernel, booted `psi=1`, running as root: the kernel's real-time trigger
//! poller, a tenth of the window). tests/vm/pressure_v2.sh gathers the
//! facts inside the VM; this file judges them:
//!
//! * with no byte threshold and `memory.full>=10%/2s`, the trigger is armed
//!   on `/proc/pressure/memory` (`/status`: mode `trigger`);
//! * quiet node: for `QOSD_PRESSURE_QUIET_SECS` (default 600: ten minutes of
//!   the VM's own clock) with every pod holding memory and a 64 MiB
//!   allocation every minute, nothing is evicted; qosd's CPU time and the
//!   pressure watcher thread's wake-ups over the phase are printed (the
//!   thread waits on the trigger: no timer);
//! * stall: a process of the Burstable pod keeps allocating above its
//!   cgroup's memory.high (throttled, no swap). The Burstable pod — the one
//!   whose own `memory.pressure` grows — is evicted, once, although the
//!   kubelet's memory order alone would take the BestEffort pod (more memory
//!   above its request); the other pods live on.
//!
//! Emulation is slow and its speed varies: generous timeouts, timings are
//! printed, not asserted. `#[ignore]`d (scripts/test runs it as root).

use crate::support;
use crate::vm;

use std::time::Duration;

use vm::Results;

const SCRIPT: &str = concat!(include_str!("lib.sh"), include_str!("pressure_v2.sh"));
const G_UID: &str = "9e55c000-0001-4000-8000-000000000001";
const B_UID: &str = "9e55c000-0002-4000-8000-000000000002";
const BE_UID: &str = "9e55c000-0003-4000-8000-000000000003";

#[test]
#[ignore = "needs root: boots a qemu VM (cgroup v2 kernel with PSI; tests/vm)"]
fn stalling_pod_evicted_once_quiet_node_untouched_on_v2() {
    let _vm = crate::vm::alone();
    let quiet: u64 = std::env::var("QOSD_PRESSURE_QUIET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let mut bins = vm::static_bins(&["qosd"]);
    bins.push(support::static_binary("memhog"));
    bins.push(support::static_binary("thrash"));
    let script = format!("QUIET_S={quiet}\n{SCRIPT}");
    let run = vm::run_script(&script, &bins, &[], Duration::from_secs(quiet + 600));
    run.assert_done("pressure v2 VM");
    let ctx = || run.context();
    let r = Results { text: &run.results };
    assert!(r.all("FATAL").is_empty(), "{}", ctx());
    assert!(r.all("MOVE_FAILED").is_empty(), "{}", ctx());
    assert!(r.all("SUBTREE_FAILED").is_empty(), "{}", ctx());

    // Armed: the kernel's trigger on the node's memory pressure.
    let armed = r.json("ARMED_STATUS");
    let sig = armed["signals"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["signal"] == "memory.full"))
        .unwrap_or_else(|| panic!("no memory.full in /status\n{}", ctx()));
    assert_eq!(sig["pressure"]["mode"], "trigger", "{sig}");
    assert_eq!(sig["pressure"]["window"], "2s", "{sig}");
    assert_eq!(sig["thresholds"][0]["threshold"], "10%/2s", "{sig}");
    assert_eq!(r.value("WATCHED"), "1");

    // Quiet: the whole phase, nothing evicted.
    assert!(r.all("QUIET_EVICTED").is_empty(), "{}", ctx());
    assert_eq!(r.value("QUIET_EVICTIONS"), "0", "{}", ctx());
    let quiet_ms = r.num("QUIET_MS");
    assert!(quiet_ms >= quiet as i64 * 1000, "{}", ctx());
    assert!(
        r.num("QUIET_CHURNS") >= (quiet / 60) as i64 - 1,
        "{}",
        ctx()
    );

    // Stall: the Burstable pod, once; the others live.
    assert!(
        !r.all("DIED").is_empty(),
        "the staller was never killed\n{}",
        ctx()
    );
    assert!(r.all("STILL_MET").is_empty(), "{}", ctx());
    assert_eq!(r.value("ALIVE b"), "no", "{}", ctx());
    assert_eq!(r.value("ALIVE g"), "yes", "{}", ctx());
    assert_eq!(r.value("ALIVE be"), "yes", "{}", ctx());
    let status = r.json("STATUS");
    let ev = status["last_evictions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(ev.len(), 1, "{ev:?}\n{}", ctx());
    let e = &ev[0];
    assert_eq!(e["uid"], B_UID, "{e}");
    assert_ne!(e["uid"], BE_UID);
    assert_ne!(e["uid"], G_UID);
    assert_eq!(e["signal"], "memory.full", "{e}");
    assert_eq!(e["threshold_kind"], "hard", "{e}");
    assert_eq!(e["backend"], "kill", "{e}");
    assert_eq!(e["detected_by"], "pressure", "{e}");
    assert_eq!(e["threshold"], 200_000, "{e}");
    assert!(e["observed"].as_i64().unwrap_or(0) >= 200_000, "{e}");
    assert_eq!(r.value("EVICTIONS_LOGGED"), "1", "{}", ctx());
    assert_eq!(r.value("QOSD_EXIT"), "0", "{}", ctx());
    assert!(
        r.all("METRIC").iter().any(|l| l.starts_with(
            "qosd_evictions_total{eviction_signal=\"memory.full\",qos_class=\"Burstable\"} 1"
        )),
        "{}",
        ctx()
    );

    let (sw0, sw1) = r
        .one("QUIET_PSI_THREAD_SWITCHES")
        .split_once(' ')
        .unwrap_or(("?", "?"));
    eprintln!(
        "v2 VM: quiet {:.0} s: qosd CPU {} ticks (1/100 s), pressure watcher thread context switches {sw0} -> {sw1}, node full stall {} µs; \
         stall start -> kill {} ms; reaction (detection -> kill) {:.1} ms, detection gap {:?} ms; whole VM run {:.1} s",
        quiet_ms as f64 / 1e3,
        r.value("QUIET_CPU_TICKS"),
        r.value("QUIET_FULL_STALL_US"),
        r.all("DIED").first().map(|d| d.trim_start_matches("thrash ")).unwrap_or("?"),
        e["reaction_ms"].as_f64().unwrap_or(f64::NAN),
        e["detection_gap_ms"].as_f64(),
        run.elapsed.as_secs_f64()
    );
}
