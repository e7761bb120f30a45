//! Disk signals for real: a small tmpfs as the kubelet root dir
//! (`--root-dir`), filled with files, drives `nodefs.available` and
//! `nodefs.inodesFree` below their thresholds; qosd reports the
//! observations, meets the thresholds and raises DiskPressure (in /status
//! and /metrics). Needs root for the mount and the cgroup root
//! (`#[ignore]`d; scripts/test runs it as root).

use std::path::Path;
use std::time::Duration;

use crate::support::*;

fn signal<'a>(doc: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    doc["signals"]
        .as_array()?
        .iter()
        .find(|s| s["signal"] == name)
}

fn condition(doc: &serde_json::Value, name: &str) -> bool {
    doc["conditions"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["condition"] == name))
        .and_then(|c| c["active"].as_bool())
        .unwrap_or(false)
}

#[test]
#[ignore = "needs root: mounts a tmpfs and creates cgroups"]
fn tmpfs_root_dir_drives_nodefs_signals_and_disk_pressure() {
    let _serial = crate::support::serial();
    require_root("mounts a tmpfs and creates cgroups");
    let prefix = format!("qosd-test-{}-disk", std::process::id());
    let mut cgroups = Cgroups::new();
    for c in ["cpu", "memory", "pids"] {
        cgroups.create(&Path::new("/sys/fs/cgroup").join(c).join(&prefix));
    }
    let tmpfs = Tmpfs::mount("size=16m,nr_inodes=400");
    let mountpoint = tmpfs.path.clone();
    let daemon = Daemon::start(&[
        "run",
        "--pods",
        "fixtures/pods",
        "--cgroup-version",
        "v1",
        "--cgroup-root",
        &format!("/{prefix}"),
        "--root-dir",
        mountpoint.to_str().unwrap(),
        "--eviction-hard",
        "nodefs.available<25%,nodefs.inodesFree<20%",
        "--eviction-pressure-transition-period",
        "1s",
        "--eviction-backend",
        "dry-run",
    ]);
    let port = daemon.port;

    // Empty filesystem: observed, not met, no pressure.
    wait_for("nodefs observations", Duration::from_secs(15), || {
        signal(&status_json(port), "nodefs.available").is_some_and(|s| s["observed"].is_i64())
    });
    let doc = status_json(port);
    let avail = signal(&doc, "nodefs.available").unwrap();
    let capacity = avail["capacity"].as_i64().unwrap();
    assert!(
        (15 << 20..=16 << 20).contains(&capacity),
        "capacity of a 16 MiB tmpfs: {capacity}"
    );
    assert_eq!(avail["thresholds"][0]["met"], false);
    assert!(!condition(&doc, "DiskPressure"));

    // Fill 14 MiB: nodefs.available drops below 25 %.
    std::fs::write(mountpoint.join("blob"), vec![7u8; 14 << 20]).unwrap();
    wait_for(
        "nodefs.available threshold met",
        Duration::from_secs(10),
        || {
            let d = status_json(port);
            signal(&d, "nodefs.available").is_some_and(|s| s["thresholds"][0]["met"] == true)
                && condition(&d, "DiskPressure")
        },
    );
    let observed = signal(&status_json(port), "nodefs.available").unwrap()["observed"]
        .as_i64()
        .unwrap();
    assert!(observed < capacity / 4, "observed {observed} of {capacity}");

    // Free the space, then exhaust the inodes with empty files.
    std::fs::remove_file(mountpoint.join("blob")).unwrap();
    for i in 0..360 {
        std::fs::write(mountpoint.join(format!("f{i}")), b"").unwrap();
    }
    wait_for(
        "nodefs.inodesFree threshold met",
        Duration::from_secs(10),
        || {
            let d = status_json(port);
            signal(&d, "nodefs.inodesFree").is_some_and(|s| s["thresholds"][0]["met"] == true)
                && signal(&d, "nodefs.available")
                    .is_some_and(|s| s["thresholds"][0]["met"] == false)
        },
    );
    let metrics = daemon.metrics();
    assert!(
        metrics.lines().any(|l| l.starts_with("qosd_node_condition")
            && l.contains("DiskPressure")
            && l.ends_with(" 1")),
        "DiskPressure gauge in /metrics:\n{metrics}"
    );
}
