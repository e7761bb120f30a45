//! The applier on this machine's real cgroup v1 hierarchies, under a unique
//! prefix `/qosd-test-<pid>-<rand>` in the cpu and memory hierarchies
//! (removed leaf first by a Drop guard, also when a check panics).
//!
//! Needs root and v1 cpu+memory controllers: `#[ignore]`d, scripts/test runs
//! it as root, where their absence fails it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{require_root, Cgroups, KillOnDrop, Memhog};
use qosd_model::core::model::{CgroupLevel, CgroupVersion, CgroupWrite};
use qosd_node::sys::apply::{self, Applier, Mode};
use qosd_node::sys::cgroupfs::{self as fs, CgroupFsError};
use qosd_node::sys::detect::{self, CgroupLayout};

struct Env {
    cpu: PathBuf,
    mem: PathBuf,
    /// Our children, killed before the cgroups go (fields drop in order).
    children: Vec<KillOnDrop>,
    _cgroups: Cgroups,
}

/// This machine's cgroup layout; panics unless it has v1 cpu and memory.
fn layout() -> CgroupLayout {
    let l = detect::detect_layout(Path::new("/proc/self/mountinfo"))
        .unwrap_or_else(|e| panic!("cgroup layout: {e}"));
    assert!(
        l.version == CgroupVersion::V1 && l.v1_dir("memory").is_some() && l.v1_dir("cpu").is_some(),
        "no cgroup v1 cpu+memory controllers mounted (layout {l:?})"
    );
    l
}

fn setup(tag: &str) -> Env {
    require_root("creates cgroups in the v1 cpu and memory hierarchies");
    let l = layout();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = format!("qosd-test-{}-{nanos:x}-{tag}", std::process::id());
    let mut cgroups = Cgroups::new();
    let cpu = cgroups.create(&l.v1_dir("cpu").unwrap().join(&name));
    let mem = cgroups.create(&l.v1_dir("memory").unwrap().join(&name));
    Env {
        cpu,
        mem,
        children: Vec::new(),
        _cgroups: cgroups,
    }
}

fn w(dir: &Path, file: &str, value: &str, level: CgroupLevel) -> CgroupWrite {
    CgroupWrite {
        file: dir.join(file),
        value: value.to_string(),
        dir: dir.to_path_buf(),
        cgroup: String::new(),
        level,
    }
}

fn read(p: &Path) -> String {
    fs::read(p).unwrap()
}

const POD: &str = "pod0a0a0a0a-1111-2222-3333-444444444444";

/// A plan like the kubelet's for one Burstable pod with cpu limit 500m and
/// memory limit 256Mi.
fn plan(cpu: &Path, mem: &Path) -> Vec<CgroupWrite> {
    let (ck, mk) = (cpu.join("kubepods"), mem.join("kubepods"));
    let (cb, mb) = (ck.join("burstable"), mk.join("burstable"));
    let (cp, mp) = (cb.join(POD), mb.join(POD));
    vec![
        w(&ck, "cpu.shares", "2048", CgroupLevel::Node),
        w(
            &mk,
            "memory.limit_in_bytes",
            "1073741824",
            CgroupLevel::Node,
        ),
        w(&cb, "cpu.shares", "512", CgroupLevel::Qos),
        w(&mb, "memory.limit_in_bytes", "-1", CgroupLevel::Qos),
        w(&cp, "cpu.shares", "512", CgroupLevel::Pod),
        w(&cp, "cpu.cfs_period_us", "100000", CgroupLevel::Pod),
        w(&cp, "cpu.cfs_quota_us", "50000", CgroupLevel::Pod),
        w(&mp, "memory.limit_in_bytes", "268435456", CgroupLevel::Pod),
    ]
}

fn applier(env: &Env) -> Applier {
    Applier::with_bases(
        Mode::Real,
        vec![env.cpu.join("kubepods"), env.mem.join("kubepods")],
    )
}

#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn values_steady_state_and_drift() {
    let env = setup("values");
    let plan = plan(&env.cpu, &env.mem);
    let mut a = applier(&env);

    let t = Instant::now();
    let r = a.apply(&plan);
    eprintln!(
        "first pass: {} writes in {:?}",
        r.write_count(),
        t.elapsed()
    );
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.created_dirs.len(), 6, "{:?}", r.created_dirs);
    let cp = env.cpu.join("kubepods/burstable").join(POD);
    let mp = env.mem.join("kubepods/burstable").join(POD);
    assert_eq!(read(&env.cpu.join("kubepods/cpu.shares")), "2048");
    assert_eq!(read(&env.cpu.join("kubepods/burstable/cpu.shares")), "512");
    assert_eq!(read(&cp.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(&cp.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read(&mp.join("memory.limit_in_bytes")), "268435456");
    assert_eq!(
        read(&env.mem.join("kubepods/burstable/memory.limit_in_bytes")),
        apply::v1_memory_unlimited().to_string()
    );

    // Steady state: zero writes, and it is cheap.
    let n = 50;
    let t = Instant::now();
    for _ in 0..n {
        let r = a.apply(&plan);
        assert_eq!(r.write_count(), 0, "{:?}", r.written);
        assert_eq!(r.unchanged, plan.len());
    }
    let per = t.elapsed() / (n * plan.len() as u32);
    eprintln!("MEASURE v1 steady-state read+compare per planned file: {per:?}");

    // Drift by someone else: exactly one corrective write.
    fs::write(&env.cpu.join("kubepods/burstable/cpu.shares"), "4096").unwrap();
    let r = a.apply(&plan);
    assert_eq!(r.write_count(), 1, "{:?}", r.written);
    assert_eq!(r.previous[0].as_deref(), Some("4096"));
    assert_eq!(read(&env.cpu.join("kubepods/burstable/cpu.shares")), "512");

    // Cost of a real write through the applier (read, compare, write).
    let f = "cpu.shares";
    let n = 200u32;
    let t = Instant::now();
    for i in 0..n {
        let v = if i % 2 == 0 { "100" } else { "200" };
        let r = a.apply(&[w(&cp, f, v, CgroupLevel::Pod)]);
        assert_eq!(r.write_count(), 1);
    }
    eprintln!(
        "MEASURE v1 applier cost per changed write: {:?}",
        t.elapsed() / n
    );

    // Dry run writes nothing.
    let r = Applier::with_bases(Mode::DryRun, vec![env.cpu.join("kubepods")]).apply(&[w(
        &cp,
        f,
        "1000",
        CgroupLevel::Pod,
    )]);
    assert_eq!(r.write_count(), 1);
    assert_eq!(read(&cp.join(f)), "200");

    // Nothing outside the allowed bases.
    let r = a.apply(&[w(&env.cpu, "cpu.shares", "3", CgroupLevel::Node)]);
    assert!(matches!(
        r.errors[0].error,
        CgroupFsError::OutsideBase { .. }
    ));
    assert_eq!(read(&env.cpu.join("cpu.shares")), "1024");
}

/// The reconcile's drift check relies on it: a write(2) to a real cgroup v1
/// control file raises inotify IN_MODIFY on it (by qosd's applier, by a
/// shell's `echo`, by anyone), a read does not; removing a cgroup raises
/// nothing on its files.
#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn cgroup_file_writes_raise_inotify_modify() {
    use qosd_node::sys::file_watch::FileWatch;
    let env = setup("inotify");
    let plan = plan(&env.cpu, &env.mem);
    let mut a = applier(&env);
    let r = a.apply(&plan);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let cp = env.cpu.join("kubepods/burstable").join(POD);
    let mp = env.mem.join("kubepods/burstable").join(POD);
    let shares = env.cpu.join("kubepods/burstable/cpu.shares");
    let quota = cp.join("cpu.cfs_quota_us");
    let limit = mp.join("memory.limit_in_bytes");
    let mut fw = FileWatch::new().expect("inotify");
    for f in [&shares, &quota, &limit] {
        fw.watch(f)
            .unwrap_or_else(|e| panic!("watch {}: {e}", f.display()));
    }
    let drained = |fw: &mut FileWatch| {
        let mut c = fw.drain().unwrap().files;
        c.sort();
        c
    };
    assert!(drained(&mut fw).is_empty());
    // Reads (the applier's steady pass) raise nothing.
    let r = a.apply(&plan);
    assert_eq!(r.write_count(), 0);
    assert!(drained(&mut fw).is_empty(), "a read is no write");
    // Another writer: a shell's echo, and a plain write(2).
    let sh = Command::new("sh")
        .arg("-c")
        .arg(format!("echo 4096 > {}", shares.display()))
        .status()
        .expect("sh");
    assert!(sh.success());
    fs::write(&limit, "134217728").unwrap();
    let mut want = vec![shares.clone(), limit.clone()];
    want.sort();
    assert_eq!(drained(&mut fw), want);
    // The same value written again is a write too.
    fs::write(&quota, "50000").unwrap();
    assert_eq!(drained(&mut fw), vec![quota.clone()]);
    // qosd's own corrective writes are seen as well (read back once).
    let r = a.apply(&plan);
    assert_eq!(r.write_count(), 2, "{:?}", r.written);
    assert_eq!(drained(&mut fw), want);
    // The pod's cgroups go away: kernfs raises nothing on the files of a
    // removed cgroup (their watches stay until removed), so the reconcile
    // drops the watches of files no longer planned.
    std::fs::remove_dir(&cp).unwrap();
    std::fs::remove_dir(&mp).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert!(drained(&mut fw).is_empty());
    assert_eq!(fw.watched(), 3);
    fw.retain(|f| f == shares);
    assert_eq!(fw.watched(), 1);
    fs::write(&shares, "512").unwrap();
    assert_eq!(drained(&mut fw), vec![shares.clone()]);
}

#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn quota_ordering_children_first_when_lowering() {
    let env = setup("order");
    let ck = env.cpu.join("kubepods");
    let cp = ck.join(POD);
    let mut a = applier(&env);
    let start = vec![
        w(&ck, "cpu.cfs_quota_us", "400000", CgroupLevel::Node),
        w(&cp, "cpu.cfs_quota_us", "200000", CgroupLevel::Pod),
    ];
    let r = a.apply(&start);
    assert!(r.errors.is_empty(), "{:?}", r.errors);

    // The kernel (v1) refuses a parent quota below a child's: lowering the
    // parent first fails...
    let naive = fs::write(&ck.join("cpu.cfs_quota_us"), "100000");
    assert!(naive.is_err(), "kernel accepted parent quota below child's");
    assert_eq!(read(&ck.join("cpu.cfs_quota_us")), "400000");

    // ...so the applier lowers the child first, whatever the plan order.
    let lower = vec![
        w(&ck, "cpu.cfs_quota_us", "100000", CgroupLevel::Node),
        w(&cp, "cpu.cfs_quota_us", "50000", CgroupLevel::Pod),
    ];
    let r = a.apply(&lower);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let order: Vec<_> = r.written.iter().map(|x| x.dir.clone()).collect();
    assert_eq!(order, vec![cp.clone(), ck.clone()]);
    assert_eq!(read(&cp.join("cpu.cfs_quota_us")), "50000");
    assert_eq!(read(&ck.join("cpu.cfs_quota_us")), "100000");

    // Raising: parent first, even when the plan lists the child first.
    let raise = vec![
        w(&cp, "cpu.cfs_quota_us", "300000", CgroupLevel::Pod),
        w(&ck, "cpu.cfs_quota_us", "-1", CgroupLevel::Node),
    ];
    let r = a.apply(&raise);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let order: Vec<_> = r.written.iter().map(|x| x.dir.clone()).collect();
    assert_eq!(order, vec![ck.clone(), cp.clone()]);
    assert_eq!(read(&ck.join("cpu.cfs_quota_us")), "-1");
    assert_eq!(a.apply(&raise).write_count(), 0);
}

#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn memory_limit_below_usage_is_ebusy_reported_once() {
    let env = setup("ebusy");
    let mk = env.mem.join("kubepods");
    let mp = mk.join(POD);
    let mut a = applier(&env);
    let r = a.apply(&[w(
        &mp,
        "memory.limit_in_bytes",
        "268435456",
        CgroupLevel::Pod,
    )]);
    assert!(r.errors.is_empty(), "{:?}", r.errors);

    // The memory hog, in the pod cgroup before it allocates 64 MiB.
    let hog = Memhog::start_in(&mp, &["64"]);
    let pid = hog.pid();
    assert_eq!(fs::list_pids(&mp).unwrap(), vec![pid as i32]);
    let usage: u64 = read(&mp.join("memory.usage_in_bytes")).parse().unwrap();
    assert!(usage >= 64 << 20, "usage {usage}");

    let target = w(&mp, "memory.limit_in_bytes", "16777216", CgroupLevel::Pod);
    let t = Instant::now();
    let r = a.apply(std::slice::from_ref(&target));
    eprintln!("EBUSY write returned after {:?}", t.elapsed());
    assert_eq!(r.write_count(), 0);
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    let e = &r.errors[0];
    assert!(
        matches!(e.error, CgroupFsError::Busy { .. }),
        "{:?}",
        e.error
    );
    let msg = e.to_string();
    assert!(
        msg.contains("memory.limit_in_bytes") && msg.contains("16777216"),
        "{msg}"
    );
    assert_eq!(read(&mp.join("memory.limit_in_bytes")), "268435456");

    // The process survives (no OOM kill from a refused limit); the one
    // pid-tree killer empties the pod cgroup.
    let t = Instant::now();
    let report = qosd_node::sys::kill::kill_cgroup_tree(&mp, Duration::from_secs(5)).unwrap();
    eprintln!("MEASURE v1 kill-all until empty: {:?}", t.elapsed());
    assert!(report.signalled >= 1);
    assert!(fs::list_pids(&mp).unwrap().is_empty());
    let st = hog.wait();
    assert!(!st.success());

    // Now the limit can be lowered.
    let r = a.apply(&[target]);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(read(&mp.join("memory.limit_in_bytes")), "16777216");
}

#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn orphans_removed_only_when_empty() {
    let mut env = setup("orphan");
    let kp = env.cpu.join("kubepods");
    let bases = vec![kp.clone()];
    let live_uid = "11111111-aaaa-bbbb-cccc-000000000001";
    let dead_uid = "11111111-aaaa-bbbb-cccc-000000000002";
    let busy_uid = "11111111-aaaa-bbbb-cccc-000000000003";
    for d in [
        kp.join(format!("besteffort/pod{live_uid}")),
        kp.join(format!("besteffort/pod{dead_uid}/ctr")),
        kp.join(format!("burstable/pod{busy_uid}/ctr")),
    ] {
        fs::mkdir_cgroup(&d, &bases).unwrap();
    }
    let sleeper = Command::new("sleep").arg("120").spawn().unwrap();
    let spid = sleeper.id();
    env.children.push(KillOnDrop(sleeper));
    let busy = kp.join(format!("burstable/pod{busy_uid}"));
    fs::write(&busy.join("ctr/cgroup.procs"), &spid.to_string()).unwrap();

    let live: BTreeSet<String> = [live_uid.to_string()].into();
    let orphans = apply::scan_orphans(std::slice::from_ref(&kp), &live).unwrap();
    let uids: Vec<_> = orphans.iter().map(|o| o.uid.as_str()).collect();
    assert_eq!(uids, vec![dead_uid, busy_uid]);
    let mut removed = Vec::new();
    let mut refused = Vec::new();
    for o in &orphans {
        match apply::remove_cgroup_tree_if_empty(&o.dir, &bases) {
            Ok(r) => removed.extend(r),
            Err(CgroupFsError::NotEmpty { pids, .. }) => refused.push(pids),
            Err(e) => panic!("{e}"),
        }
    }
    let dead = kp.join(format!("besteffort/pod{dead_uid}"));
    assert_eq!(removed, vec![dead.join("ctr"), dead.clone()]);
    assert_eq!(refused, vec![vec![spid as i32]]);
    assert!(busy.join("ctr").is_dir());
    assert!(kp.join(format!("besteffort/pod{live_uid}")).is_dir());

    // Kill the busy one's processes; then it goes.
    qosd_node::sys::kill::kill_cgroup_tree(&busy, Duration::from_secs(5)).unwrap();
    let _ = env.children.pop().unwrap().0.wait();
    let r = apply::remove_cgroup_tree_if_empty(&busy, &bases).unwrap();
    assert_eq!(r, vec![busy.join("ctr"), busy.clone()]);
}

#[test]
#[ignore = "needs root: a cgroup v1 host like the CI machine (reads its cgroup mounts)"]
fn layout_of_this_machine() {
    let l = layout();
    // Every v1 controller dir found in mountinfo is a real cgroup v1 mount
    // holding that controller's files.
    assert!(l.v1_dir("cpu").unwrap().join("cpu.shares").is_file());
    assert!(l
        .v1_dir("memory")
        .unwrap()
        .join("memory.limit_in_bytes")
        .is_file());
    assert_eq!(
        detect::detect_version(l.v1_dir("memory").unwrap().parent().unwrap()).unwrap(),
        CgroupVersion::V1
    );
    if let Some(v2) = &l.v2 {
        assert!(l.hybrid);
        assert!(v2.join("cgroup.controllers").is_file());
    }
    let all = l.dirs_all("kubepods");
    assert!(all.len() >= 2, "{all:?}");
}
