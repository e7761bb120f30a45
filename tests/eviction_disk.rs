//! Disk pressure on a real (tmpfs) filesystem used as the kubelet root dir:
//! files written by "pods" drive nodefs.available and nodefs.inodesFree,
//! the manager reports DiskPressure and picks the pod using the most
//! ephemeral storage beyond its request. Needs root (mount; `#[ignore]`d,
//! scripts/test runs it as root).

mod support;

use std::path::Path;
use std::time::Instant;

use qosd::core::model::{CgroupVersion, QosClass};
use qosd::policy::evict::manager::{Manager, ManagerOptions};
use qosd::policy::evict::rank::{Candidate, PodStats};
use qosd::policy::evict::threshold::{
    parse_threshold_flag, EvictionConfig, NodeCondition, RawEvictionConfig, Signal,
};
use qosd::sys::signals::SignalSources;
use support::{require_root, Tmpfs};

fn fill(dir: &Path, files: usize, bytes_each: usize) -> u64 {
    std::fs::create_dir_all(dir).unwrap();
    let buf = vec![7u8; bytes_each];
    for i in 0..files {
        std::fs::write(dir.join(format!("f{i}")), &buf).unwrap();
    }
    (files * bytes_each) as u64
}

fn pod(uid: &str, req: i64, usage: u64, inodes: u64) -> Candidate {
    Candidate {
        uid: uid.into(),
        namespace: "ns".into(),
        name: uid.into(),
        qos: QosClass::Burstable,
        priority: 0,
        static_or_mirror: false,
        memory_request_bytes: 0,
        ephemeral_storage_request_bytes: req,
        termination_grace_period_seconds: None,
        sandbox_id: None,
        cgroup_dirs: vec![],
        stats: Some(PodStats {
            ephemeral_storage_bytes: Some(usage),
            inodes: Some(inodes),
            memory_working_set_bytes: Some(1),
            processes: Some(1),
        }),
    }
}

#[test]
#[ignore = "needs root: mounts a tmpfs"]
fn tmpfs_root_dir_drives_nodefs_signals() {
    require_root("mounts a tmpfs");
    let m = Tmpfs::mount("size=16m,nr_inodes=200");
    let sources = SignalSources {
        nodefs: Some(m.path.clone()),
        ..SignalSources::host(CgroupVersion::V1)
    };
    let cfg = EvictionConfig::from_raw(&RawEvictionConfig {
        eviction_hard: Some(
            parse_threshold_flag(
                "eviction-hard",
                "nodefs.available<25%,nodefs.inodesFree<20%",
            )
            .unwrap(),
        ),
        ..Default::default()
    })
    .unwrap();
    let mut mgr = Manager::new(cfg, ManagerOptions::default());

    let (avail0, cap) = sources.read(Signal::NodeFsAvailable).unwrap();
    assert_eq!(cap, 16 << 20);
    assert_eq!(avail0, cap);
    let now = Instant::now();
    let (obs, errs) = sources.observe([Signal::NodeFsAvailable, Signal::NodeFsInodesFree], now);
    assert!(errs.is_empty());
    let d = mgr.synchronize(now, &obs, Ok(&[]));
    assert!(d.conditions.is_empty());

    // pod a writes 10 MiB in 10 files (request 1 MiB); pod b ~3 MiB in 100 files (request 8 MiB)
    let a = fill(&m.path.join("pods/a"), 10, 1 << 20);
    let b = fill(&m.path.join("pods/b"), 100, 30 << 10);
    let pods = [pod("a", 1 << 20, a, 11), pod("b", 8 << 20, b, 101)];
    let (avail, _) = sources.read(Signal::NodeFsAvailable).unwrap();
    assert!(
        avail <= cap - a as i64,
        "available {avail} after writing {a}"
    );
    let now = Instant::now();
    let (obs, _) = sources.observe([Signal::NodeFsAvailable, Signal::NodeFsInodesFree], now);
    let d = mgr.synchronize(now, &obs, Ok(&pods));
    assert_eq!(d.conditions, vec![NodeCondition::DiskPressure]);
    let met: Vec<Signal> = d.met().map(|t| t.threshold.signal).collect();
    assert!(met.contains(&Signal::NodeFsAvailable), "{met:?}");
    // 200 inodes, ~113 used: 87 free ≥ 40 (20%): inodes not met
    assert!(!met.contains(&Signal::NodeFsInodesFree), "{met:?}");
    let v = d.victim().expect("victim");
    assert_eq!(v.signal, Signal::NodeFsAvailable);
    assert_eq!(v.candidate.uid, "a", "a exceeds its request, b does not");

    // many small files exhaust inodes
    let mut mgr = Manager::new(mgr.config().clone(), ManagerOptions::default());
    fill(&m.path.join("pods/c"), 60, 16);
    let now = Instant::now();
    let (obs, _) = sources.observe([Signal::NodeFsInodesFree], now);
    let (free, total) = sources.read(Signal::NodeFsInodesFree).unwrap();
    assert_eq!(total, 200);
    assert!(free < 40, "free inodes {free}");
    let d = mgr.synchronize(now, &obs, Ok(&pods));
    assert!(d
        .met()
        .any(|t| t.threshold.signal == Signal::NodeFsInodesFree));
}
