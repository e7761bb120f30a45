//! The one walk to a cgroup directory: a symlink, a regular file or another
//! filesystem below the cgroup root is refused by every writer, creator,
//! remover and the killer, and nothing outside the tree is touched.
//!
//! Two kinds of trees: a fixture tree on a private tmpfs (where symlinks
//! and files can be planted, as on a root that is not a cgroup filesystem)
//! and this machine's real cgroup v1 hierarchies under a unique
//! `/qosd-test-<pid>-…` prefix (where a different filesystem is mounted
//! below the root). Both need root: `#[ignore]`d, scripts/test runs them.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{qosd_bounded, repo_root, require_root, Cgroups, KillOnDrop, Tmpfs};
use qosd_model::core::model::{CgroupLevel, CgroupVersion, CgroupWrite};
use qosd_node::sys::apply::{self, Applier, Mode};
use qosd_node::sys::cgroup_dir::WalkError;
use qosd_node::sys::cgroupfs::{self as fs, CgroupFsError};
use qosd_node::sys::detect;
use qosd_node::sys::kill::{cgroup_tree_pids, kill_cgroup_tree, KillError};

/// The uid of fixtures/pods/01-qos-demo.yaml (a Guaranteed pod).
const POD: &str = "pod6c1a1f2e-0001-4d5e-9a00-000000000001";

/// A v1 fixture tree on a private tmpfs: `<cg>/{cpu,cpuacct,memory,pids}/
/// qosd-test-walk/kubepods/{burstable,besteffort}` with their interface
/// files, and an `outside` directory next to it holding files of the same
/// names (value "1").
struct Tree {
    tmp: Tmpfs,
}

impl Tree {
    fn new() -> Tree {
        let tmp = Tmpfs::mount("size=8m");
        let t = Tree { tmp };
        for h in ["cpu,cpuacct", "memory"] {
            for d in ["kubepods/burstable", "kubepods/besteffort"] {
                std::fs::create_dir_all(t.root(h).join(d)).unwrap();
            }
        }
        std::fs::create_dir_all(t.root("pids")).unwrap();
        for d in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            std::fs::write(t.root("cpu,cpuacct").join(d).join("cpu.shares"), "2").unwrap();
            std::fs::write(t.root("memory").join(d).join("memory.limit_in_bytes"), "9").unwrap();
        }
        std::fs::create_dir(t.outside()).unwrap();
        for f in OUTSIDE_FILES {
            std::fs::write(t.outside().join(f), "1").unwrap();
        }
        t
    }

    fn cg(&self) -> PathBuf {
        self.tmp.path.join("cg")
    }

    fn root(&self, h: &str) -> PathBuf {
        self.cg().join(h).join("qosd-test-walk")
    }

    fn kubepods(&self, h: &str) -> PathBuf {
        self.root(h).join("kubepods")
    }

    fn outside(&self) -> PathBuf {
        self.tmp.path.join("outside")
    }

    /// Every file outside still holds "1", and nothing was added.
    fn assert_outside_untouched(&self) {
        for f in OUTSIDE_FILES {
            assert_eq!(
                std::fs::read_to_string(self.outside().join(f)).unwrap(),
                "1",
                "{f} outside the tree was written"
            );
        }
        let n = std::fs::read_dir(self.outside()).unwrap().count();
        assert_eq!(n, OUTSIDE_FILES.len(), "something was created outside");
    }

    /// `qosd run --once --mode enforce` on this tree for the Guaranteed pod.
    fn run_once(&self) -> (i32, String, String) {
        let pods = tempfile::tempdir().unwrap();
        std::fs::copy(
            repo_root().join("fixtures/pods/01-qos-demo.yaml"),
            pods.path().join("01-qos-demo.yaml"),
        )
        .unwrap();
        let state = tempfile::tempdir().unwrap();
        let cg = self.cg();
        let args = [
            "run",
            "--once",
            "--mode",
            "enforce",
            "--pods",
            pods.path().to_str().unwrap(),
            "--cgroupfs",
            cg.to_str().unwrap(),
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            "/qosd-test-walk",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
            "--root-dir",
            state.path().to_str().unwrap(),
        ];
        qosd_bounded(&args, Stdio::piped())
    }
}

const OUTSIDE_FILES: [&str; 4] = [
    "cpu.shares",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "memory.limit_in_bytes",
];

fn w(dir: &Path, file: &str, value: &str, level: CgroupLevel) -> CgroupWrite {
    CgroupWrite {
        file: dir.join(file),
        value: value.to_string(),
        dir: dir.to_path_buf(),
        cgroup: String::new(),
        level,
    }
}

#[test]
#[ignore = "needs root: mounts a tmpfs for a planted fixture tree"]
fn a_symlink_planted_inside_kubepods_is_refused_by_the_binary() {
    require_root("mounts a tmpfs");
    let t = Tree::new();
    for h in ["cpu,cpuacct", "memory"] {
        std::os::unix::fs::symlink(t.outside(), t.kubepods(h).join(POD)).unwrap();
    }
    let (code, out, err) = t.run_once();
    let all = format!("{out}\n{err}");
    assert!(
        all.contains(&format!("{POD}/cpu.shares")) && all.contains("symlink"),
        "exit {code}; the pod's writes are not refused naming the symlink:\n{all}"
    );
    t.assert_outside_untouched();
    // The rest of the node is still enforced.
    assert_eq!(
        std::fs::read_to_string(t.kubepods("cpu,cpuacct").join("cpu.shares")).unwrap(),
        "4096"
    );
    assert!(t.kubepods("cpu,cpuacct").join(POD).is_symlink());
}

#[test]
#[ignore = "needs root: mounts a tmpfs for a planted fixture tree"]
fn a_symlinked_qos_cgroup_is_never_written_through_or_created_in() {
    require_root("mounts a tmpfs");
    let t = Tree::new();
    // kubepods/burstable → outside: the walk refuses every path below it.
    let kp = t.kubepods("cpu,cpuacct");
    std::fs::remove_file(kp.join("burstable/cpu.shares")).unwrap();
    std::fs::remove_dir(kp.join("burstable")).unwrap();
    std::os::unix::fs::symlink(t.outside(), kp.join("burstable")).unwrap();
    let bases = vec![kp.clone()];
    let e = fs::write_walked(&kp.join("burstable/cpu.shares"), "5", &bases).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    let e = fs::mkdir_cgroup(&kp.join("burstable/podnew"), &bases).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
    let mut a = Applier::with_bases(Mode::Real, bases.clone());
    let r = a.apply(&[
        w(&kp.join("burstable"), "cpu.shares", "7", CgroupLevel::Qos),
        w(
            &kp.join("burstable/podb"),
            "cpu.shares",
            "7",
            CgroupLevel::Pod,
        ),
        w(&kp, "cpu.shares", "3", CgroupLevel::Node),
    ]);
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    assert_eq!(r.written.len(), 1, "the node level is still written");
    t.assert_outside_untouched();
}

#[test]
#[ignore = "needs root: mounts a tmpfs for a planted fixture tree"]
fn a_regular_file_where_a_cgroup_is_expected_is_refused() {
    require_root("mounts a tmpfs");
    let t = Tree::new();
    let kp = t.kubepods("cpu,cpuacct");
    std::fs::write(kp.join(POD), "not a cgroup").unwrap();
    let bases = vec![kp.clone()];
    let e = fs::mkdir_cgroup(&kp.join(POD).join("ctr"), &bases).unwrap_err();
    assert!(
        matches!(
            e,
            CgroupFsError::Walk(WalkError::NotADirectory {
                found: "regular file",
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains(POD), "{e}");
    let e = fs::write_walked(&kp.join(POD).join("cpu.shares"), "2", &bases).unwrap_err();
    assert!(e.to_string().contains("regular file"), "{e}");
    // The binary reports the pod's cgroup and leaves the file as it was.
    let (code, out, err) = t.run_once();
    let all = format!("{out}\n{err}");
    assert!(all.contains(POD), "exit {code}:\n{all}");
    assert_eq!(
        std::fs::read_to_string(kp.join(POD)).unwrap(),
        "not a cgroup"
    );
    t.assert_outside_untouched();
}

#[test]
#[ignore = "needs root: mounts a tmpfs for a planted fixture tree"]
fn orphan_removal_and_the_killer_never_follow_a_symlink() {
    require_root("mounts a tmpfs");
    let t = Tree::new();
    let kp = t.kubepods("memory");
    // Outside: a cgroup-looking tree with a process of this test.
    let victim_dir = t.outside().join("podvictim");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::write(victim_dir.join("cgroup.procs"), "").unwrap();
    let victim = KillOnDrop(Command::new("sleep").arg("60").spawn().unwrap());
    std::fs::write(t.outside().join("cgroup.procs"), victim.0.id().to_string()).unwrap();
    let orphan = "pod0e0e0e0e-1111-2222-3333-444444444444";
    std::os::unix::fs::symlink(t.outside(), kp.join(orphan)).unwrap();
    std::os::unix::fs::symlink(t.outside(), kp.join("besteffort/podlink")).unwrap();

    // Orphan scan lists no symlink; removing one directly is refused.
    let live = Default::default();
    let orphans = apply::scan_orphans(std::slice::from_ref(&kp), &live).unwrap();
    assert!(orphans.is_empty(), "{orphans:?}");
    let bases = vec![kp.clone()];
    for p in [kp.join(orphan), kp.join(orphan).join("podvictim")] {
        let e = apply::remove_cgroup_tree_if_empty(&p, &bases).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{}: {e}", p.display());
    }
    assert!(victim_dir.is_dir());

    // The killer refuses the link, whatever its cgroup.procs lists.
    for p in [kp.join(orphan), kp.join("besteffort/podlink")] {
        let e = cgroup_tree_pids(&p).unwrap_err();
        assert!(
            matches!(
                e,
                KillError::Walk {
                    source: WalkError::Symlink { .. },
                    ..
                }
            ),
            "{e}"
        );
        let e = kill_cgroup_tree(&p, std::time::Duration::from_millis(50)).unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
    }
    let mut v = victim;
    assert!(
        v.0.try_wait().unwrap().is_none(),
        "the outside process lives"
    );
    // A real orphan next to it is still removed.
    let real = kp.join("besteffort/pod0f0f0f0f-1111-2222-3333-444444444444");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("cgroup.procs"), "").unwrap();
    let removed = apply::remove_cgroup_tree_if_empty(&real, &bases).unwrap();
    assert_eq!(removed, vec![real.clone()]);
    assert!(!real.exists());
    let _ = v.0.kill();
}

/// A mount placed on a directory by this test; unmounted on drop (before
/// the cgroups it sits in are removed: declare it after them).
struct Mounted(PathBuf);

impl Mounted {
    fn tmpfs(on: &Path) -> Mounted {
        nix::mount::mount(
            Some("tmpfs"),
            on,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some("size=1m"),
        )
        .unwrap_or_else(|e| panic!("mount tmpfs on {}: {e}", on.display()));
        Mounted(on.to_path_buf())
    }

    fn bind(from: &Path, on: &Path) -> Mounted {
        nix::mount::mount(
            Some(from),
            on,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap_or_else(|e| panic!("bind {} on {}: {e}", from.display(), on.display()));
        Mounted(on.to_path_buf())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// This machine's v1 cpu and memory hierarchies, with a private
/// `qosd-test-…/kubepods` in each.
fn real_v1(tag: &str) -> (Cgroups, PathBuf, PathBuf) {
    require_root("creates cgroups in the v1 cpu and memory hierarchies");
    let l = detect::detect_layout(Path::new("/proc/self/mountinfo")).unwrap();
    assert!(
        l.version == CgroupVersion::V1 && l.v1_dir("cpu").is_some() && l.v1_dir("memory").is_some(),
        "no cgroup v1 cpu+memory controllers mounted ({l:?})"
    );
    let name = format!("qosd-test-{}-walk-{tag}", std::process::id());
    let mut cgroups = Cgroups::new();
    let cpu = cgroups.create(&l.v1_dir("cpu").unwrap().join(&name));
    let mem = cgroups.create(&l.v1_dir("memory").unwrap().join(&name));
    std::fs::create_dir(cpu.join("kubepods")).unwrap();
    std::fs::create_dir(mem.join("kubepods")).unwrap();
    (cgroups, cpu.join("kubepods"), mem.join("kubepods"))
}

#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn another_filesystem_below_a_real_cgroup_root_is_refused() {
    let (_cgroups, kp, _mkp) = real_v1("fs");
    let pod = kp.join(POD);
    std::fs::create_dir(&pod).unwrap();
    let _m = Mounted::tmpfs(&pod);
    std::fs::write(pod.join("cpu.shares"), "1").unwrap();
    let bases = vec![kp.clone()];
    let mut a = Applier::with_bases(Mode::Real, bases.clone());
    let r = a.apply(&[
        w(&pod, "cpu.shares", "716", CgroupLevel::Pod),
        w(&kp, "cpu.shares", "4096", CgroupLevel::Node),
    ]);
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    let e = r.errors[0].error.to_string();
    assert!(
        e.contains(POD) && e.contains("0x1021994") && e.contains("0x27e0eb"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(pod.join("cpu.shares")).unwrap(),
        "1"
    );
    assert_eq!(fs::read(&kp.join("cpu.shares")).unwrap(), "4096");
    let e = fs::mkdir_cgroup(&pod.join("ctr"), &bases).unwrap_err();
    assert!(
        matches!(e, CgroupFsError::Walk(WalkError::Filesystem { .. })),
        "{e}"
    );
    assert!(!pod.join("ctr").exists());
    let e = apply::remove_cgroup_tree_if_empty(&pod, &bases).unwrap_err();
    assert!(
        matches!(e, CgroupFsError::Walk(WalkError::Filesystem { .. })),
        "{e}"
    );
}

#[test]
#[ignore = "needs root: creates cgroups in this machine's cgroup v1 hierarchies"]
fn another_cgroup_mount_below_a_real_cgroup_root_is_never_killed() {
    let (_cgroups, kp, mkp) = real_v1("bind");
    // A process of this test in a memory cgroup; that cgroup is bound onto
    // a pod cgroup of the cpu hierarchy (same magic, another mount).
    let victim_cg = mkp.join("victim");
    std::fs::create_dir(&victim_cg).unwrap();
    let mut cmd = Command::new("sleep");
    cmd.arg("60");
    support::in_cgroup(&mut cmd, &victim_cg);
    let mut victim = KillOnDrop(cmd.spawn().unwrap());
    let pod = kp.join("besteffort").join(POD);
    std::fs::create_dir_all(&pod).unwrap();
    let _m = Mounted::bind(&victim_cg, &pod);
    assert!(fs::read(&pod.join("cgroup.procs"))
        .unwrap()
        .contains(&victim.0.id().to_string()));
    let e = kill_cgroup_tree(&pod, std::time::Duration::from_millis(50)).unwrap_err();
    assert!(
        matches!(
            e,
            KillError::Walk {
                source: WalkError::Mount { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(POD), "{e}");
    let e = cgroup_tree_pids(&kp.join("besteffort")).unwrap_err();
    assert!(matches!(e, KillError::Walk { .. }), "{e}");
    assert!(victim.0.try_wait().unwrap().is_none(), "the process lives");
    let e = fs::write_walked(&pod.join("cpu.shares"), "2", std::slice::from_ref(&kp)).unwrap_err();
    assert!(
        matches!(e, CgroupFsError::Walk(WalkError::Mount { .. })),
        "{e}"
    );
    drop(_m);
    let _ = victim.0.kill();
    let _ = victim.0.wait();
}
