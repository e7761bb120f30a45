//! Disk signals for real: a small tmpfs as the kubelet root dir
//! (`--root-dir`), filled with files, drives `nodefs.available` and
//! `nodefs.inodesFree` below their thresholds; qosd reports the
//! observations, meets the thresholds and raises DiskPressure (in /status
//! and /metrics). Needs root for the mount and the cgroup root (skips
//! otherwise, saying why).

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use support::{free_port, status_json};

struct Guard {
    child: Option<Child>,
    mountpoint: PathBuf,
    cgroups: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
            let _ = c.wait();
        }
        let _ = umount2(&self.mountpoint, MntFlags::MNT_DETACH);
        for root in &self.cgroups {
            // leaf first: deepest paths first
            let mut dirs: Vec<PathBuf> = walk(root);
            dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for d in dirs {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

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

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn tmpfs_root_dir_drives_nodefs_signals_and_disk_pressure() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping tmpfs_root_dir_drives_nodefs_signals_and_disk_pressure: needs root (mounts a tmpfs, creates cgroups)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("kubelet");
    std::fs::create_dir(&mountpoint).unwrap();
    let prefix = format!("qosd-test-{}-disk", std::process::id());
    let cgroups: Vec<PathBuf> = ["cpu", "memory", "pids"]
        .iter()
        .map(|c| Path::new("/sys/fs/cgroup").join(c).join(&prefix))
        .collect();
    let mut guard = Guard {
        child: None,
        mountpoint: mountpoint.clone(),
        cgroups: cgroups.clone(),
        _dir: dir,
    };
    mount(
        Some("tmpfs"),
        &mountpoint,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("size=16m,nr_inodes=400"),
    )
    .expect("mount tmpfs");
    for c in &cgroups {
        std::fs::create_dir(c).unwrap();
    }
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args([
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
            "--metrics-address",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    guard.child = Some(child);

    // Empty filesystem: observed, not met, no pressure.
    wait_for("nodefs observations", 15, || {
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
    wait_for("nodefs.available threshold met", 10, || {
        let d = status_json(port);
        signal(&d, "nodefs.available").is_some_and(|s| s["thresholds"][0]["met"] == true)
            && condition(&d, "DiskPressure")
    });
    let observed = signal(&status_json(port), "nodefs.available").unwrap()["observed"]
        .as_i64()
        .unwrap();
    assert!(observed < capacity / 4, "observed {observed} of {capacity}");

    // Free the space, then exhaust the inodes with empty files.
    std::fs::remove_file(mountpoint.join("blob")).unwrap();
    for i in 0..360 {
        std::fs::write(mountpoint.join(format!("f{i}")), b"").unwrap();
    }
    wait_for("nodefs.inodesFree threshold met", 10, || {
        let d = status_json(port);
        signal(&d, "nodefs.inodesFree").is_some_and(|s| s["thresholds"][0]["met"] == true)
            && signal(&d, "nodefs.available").is_some_and(|s| s["thresholds"][0]["met"] == false)
    });
    let metrics = qosd::telemetry::client::get(
        format!("127.0.0.1:{port}").parse().unwrap(),
        "/metrics",
        Duration::from_secs(2),
    )
    .unwrap()
    .body;
    assert!(
        metrics.lines().any(|l| l.starts_with("qosd_node_condition")
            && l.contains("DiskPressure")
            && l.ends_with(" 1")),
        "DiskPressure gauge in /metrics:\n{metrics}"
    );
}
