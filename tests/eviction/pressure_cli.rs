//! Pressure thresholds through `qosd run` without root: a fake node
//! (manifests, a private cgroup v2 directory, dry-run) whose `/proc` is a
//! directory the test controls (`--proc-root`).
//!
//! * no pressure files there (a kernel without PSI, or `psi=0`): the signal
//!   is reported unavailable with the reason in `/status` and the metrics,
//!   never silently absent;
//! * a pressure file that is not the kernel's: no trigger can be armed, the
//!   stall counter is polled (mode `poll`, with the reason); when it grows
//!   past the line within the window a pod is evicted (dry-run) once, for
//!   `memory.full` (no per-pod pressure files here: the kubelet's memory
//!   order, which `tests/eviction/eviction_order_cli.rs` and the model's tables
//!   check).

use std::path::Path;
use std::time::Duration;

use crate::support::*;

fn pressure_args(dir: &Path, proc_root: &Path) -> Vec<String> {
    let mut a = fake_node_run_args(dir, &["--dry-run"]);
    for s in [
        "--proc-root",
        proc_root.to_str().unwrap(),
        "--eviction-hard",
        "",
        "--eviction-pressure-hard",
        "memory.full=10%/2s",
    ] {
        a.push(s.to_string());
    }
    a
}

fn memory_full(status: &serde_json::Value) -> serde_json::Value {
    status["signals"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["signal"] == "memory.full").cloned())
        .unwrap_or_default()
}

/// `/status`, or null while the server is not up yet.
fn status(d: &Daemon) -> serde_json::Value {
    d.get("/status")
        .filter(|r| r.status == 200)
        .and_then(|r| serde_json::from_str(&r.body).ok())
        .unwrap_or_default()
}

fn write_pressure(proc_root: &Path, full_us: u64) {
    std::fs::write(
        proc_root.join("pressure/memory"),
        format!(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total={full_us}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total={full_us}\n"
        ),
    )
    .unwrap();
}

#[test]
fn no_psi_is_reported_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir(&proc_root).unwrap();
    let args = pressure_args(dir.path(), &proc_root);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start(&args);
    let mut sig = serde_json::Value::Null;
    wait_for("memory.full in /status", Duration::from_secs(30), || {
        sig = memory_full(&status(&d));
        !sig["pressure"].is_null()
    });
    assert_eq!(sig["pressure"]["mode"], "unavailable", "{sig}");
    let detail = sig["pressure"]["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("psi=0") && detail.contains("pressure/memory"),
        "{detail}"
    );
    assert!(sig["observed"].is_null(), "unknown is not 0: {sig}");
    assert_eq!(sig["thresholds"][0]["threshold"], "10%/2s");
    let m = d.metrics();
    assert_eq!(
        sample(
            &m,
            "qosd_signal_pressure_detector{eviction_signal=\"memory.full\",mode=\"unavailable\"}"
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "qosd_signal_pressure_available{resource=\"memory\"}"),
        Some(0.0)
    );
    assert!(
        !m.contains("qosd_signal_pressure_stall_seconds_total{"),
        "no total where there is no file"
    );
    assert!(
        d.log().contains("pressure signal unavailable"),
        "{}",
        d.log()
    );
    d.assert_running();
    d.stop();
}

#[test]
fn polled_where_no_trigger_can_be_armed_and_evicts_once() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join("pressure")).unwrap();
    write_pressure(&proc_root, 1_000);
    let args = pressure_args(dir.path(), &proc_root);
    // One pod's cgroup with memory stats (a dry run creates none): pods
    // are ranked, not blocked on missing data.
    let pod = dir
        .path()
        .join("cgroup/kubepods/besteffort/pod6c1a1f2e-0003-4d5e-9a00-000000000003");
    std::fs::create_dir_all(&pod).unwrap();
    std::fs::write(pod.join("memory.current"), format!("{}\n", 300u64 << 20)).unwrap();
    std::fs::write(
        pod.join("memory.stat"),
        "anon 314572800\nfile 0\ninactive_file 0\n",
    )
    .unwrap();
    // a fake pid above the kernel's maximum: never a real process
    std::fs::write(pod.join("cgroup.procs"), "4194401\n").unwrap();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start(&args);
    let mut sig = serde_json::Value::Null;
    wait_for("memory.full polled", Duration::from_secs(30), || {
        let st = status(&d);
        sig = memory_full(&st);
        sig["pressure"]["mode"] == "poll" && st["pods"]["best_effort"].as_u64() > Some(0)
    });
    let detail = sig["pressure"]["detail"].as_str().unwrap_or("");
    assert!(detail.contains("not a kernel pressure file"), "{detail}");
    assert!(d.status()["last_evictions"]
        .as_array()
        .is_some_and(|a| a.is_empty()));
    // 400 ms of full stall: twice the line within the 2 s window
    write_pressure(&proc_root, 401_000);
    let mut ev = Vec::new();
    wait_for(
        "a dry-run eviction for memory.full",
        Duration::from_secs(30),
        || {
            ev = status(&d)["last_evictions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            !ev.is_empty()
        },
    );
    let e = &ev[0];
    assert_eq!(e["signal"], "memory.full", "{e}");
    assert_eq!(e["backend"], "dry-run", "{e}");
    assert_eq!(e["threshold"], 200_000, "{e}");
    assert!(e["observed"].as_i64() >= Some(200_000), "{e}");
    // the stall stops growing: the window empties, nothing more
    wait_for("memory.full no longer met", Duration::from_secs(30), || {
        memory_full(&status(&d))["thresholds"][0]["met"] == false
    });
    let m = d.metrics();
    let total: f64 = m
        .lines()
        .filter(|l| l.starts_with("qosd_dry_run_evictions_total{eviction_signal=\"memory.full\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(total, 1.0, "{m}");
    assert_eq!(
        d.status()["last_evictions"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(
        sample(
            &m,
            "qosd_signal_pressure_stall_seconds_total{resource=\"memory\",line=\"full\"}"
        ),
        Some(0.401),
        "{m}"
    );
    d.assert_running();
    d.stop();
}
