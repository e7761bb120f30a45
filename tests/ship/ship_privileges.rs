//! The least privilege claimed by systemd/qosd.service and
//! deploy/daemonset.yaml, checked on the real kernel: a root process whose
//! capability bounding set is only CAP_KILL (what `User=root` +
//! `CapabilityBoundingSet=CAP_KILL` + `NoNewPrivileges=yes` give, and what
//! `drop: [ALL], add: [KILL]` gives in the pod) can
//!
//! * create a cgroup, write its interface files and remove it,
//! * read the PIDs of a pod cgroup and SIGKILL a process of another user in it,
//! * read that process's /proc/<pid>/status and cgroup,
//! * connect to a root-owned 0600 UNIX socket (the CRI socket),
//!
//! and without CAP_KILL it cannot kill the other user's process (so the
//! capability is needed, not just allowed).
//!
//! Needs root, `setpriv` (util-linux) and a writable cgroupfs: `#[ignore]`d,
//! scripts/test runs it as root, where a missing one fails it. Creates only `/qosd-test-<pid>-priv` cgroups (removed
//! afterwards, even on failure) and kills only the process it started.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::{require_root, require_tools, Cgroups, KillOnDrop};

/// Root and setpriv; panics naming what is missing.
fn preconditions() {
    require_root("runs processes with a reduced capability bounding set");
    require_tools(&["setpriv"], "apt-get install -y util-linux");
}

/// The cgroup to test in: v1 `cpu` controller if mounted, else the v2 root.
fn cgroup_base() -> Option<(PathBuf, &'static str)> {
    let v1 = Path::new("/sys/fs/cgroup/cpu");
    if v1.join("cpu.shares").exists() {
        return Some((v1.to_path_buf(), "cpu.shares"));
    }
    let v2 = Path::new("/sys/fs/cgroup");
    if v2.join("cgroup.controllers").exists() {
        let ctl = std::fs::read_to_string(v2.join("cgroup.subtree_control")).unwrap_or_default();
        if ctl.split_whitespace().any(|c| c == "cpu") {
            return Some((v2.to_path_buf(), "cpu.weight"));
        }
        return Some((v2.to_path_buf(), "cgroup.type"));
    }
    None
}

/// Run `script` with sh as root limited to `caps` (e.g. "+kill" or "").
fn capped_sh(caps: &str, script: &str, args: &[&str]) -> std::process::Output {
    let bounding = format!("-all{}{}", if caps.is_empty() { "" } else { "," }, caps);
    Command::new("setpriv")
        .args([
            "--no-new-privs",
            "--inh-caps=-all",
            &format!("--bounding-set={bounding}"),
            "--",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .args(args)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs root: creates a cgroup, drops capabilities with setpriv"]
fn cap_kill_alone_is_enough_and_needed() {
    preconditions();
    let (base, knob) = cgroup_base().expect("no cgroupfs at /sys/fs/cgroup");
    let parent = base.join(format!("qosd-test-{}-priv", std::process::id()));
    let pod = parent.join("podtest");
    let mut guard = Cgroups::new();
    guard.create(&parent);

    // 1. As root with only CAP_KILL: create the pod cgroup, write a knob, read it.
    let value = if knob == "cpu.shares" { "512" } else { "50" };
    let script = r#"set -e
mkdir "$1"
if [ "$2" != cgroup.type ]; then echo "$3" > "$1/$2"; fi
cat "$1/$2"
grep -i '^CapEff' /proc/self/status
"#;
    let out = capped_sh("+kill", script, &[pod.to_str().unwrap(), knob, value]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cgroup create/write with CAP_KILL only failed: {}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    if knob != "cgroup.type" {
        assert!(stdout.lines().next() == Some(value), "{stdout}");
    }
    // CapEff is exactly CAP_KILL (bit 5 = 0x20).
    assert!(stdout.contains("CapEff:\t0000000000000020"), "{stdout}");

    // 2. A process of another user inside the pod cgroup.
    let sleeper = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "300",
        ])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let pid = sleeper.id();
    let sleeper = KillOnDrop(sleeper);
    std::fs::write(pod.join("cgroup.procs"), pid.to_string()).unwrap();

    // 3. Without CAP_KILL: the pod's processes are listed and readable, but
    //    the kill is refused.
    let read_and_kill = r#"set -e
pids=$(cat "$1/cgroup.procs")
[ -n "$pids" ]
for p in $pids; do
  grep -q '^Uid:.*65534' /proc/$p/status
  grep -q podtest /proc/$p/cgroup
done
for p in $pids; do kill -KILL $p; done
"#;
    let out = capped_sh("", read_and_kill, &[pod.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kill without CAP_KILL should fail");
    assert!(
        err.to_lowercase().contains("not permitted"),
        "expected EPERM, got: {err}"
    );
    assert!(Path::new(&format!("/proc/{pid}")).exists());

    // 4. With CAP_KILL: the same script kills it.
    let out = capped_sh("+kill", read_and_kill, &[pod.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "kill with CAP_KILL failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut sleeper = sleeper;
    let status = sleeper.0.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status:?}");

    // 5. Remove the pod cgroup without capabilities.
    let out = capped_sh("+kill", "rmdir \"$1\"", &[pod.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "rmdir failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(guard);
    assert!(!parent.exists());
}

#[test]
#[ignore = "needs root: drops capabilities with setpriv"]
fn cri_socket_connect_needs_no_capability() {
    preconditions();
    require_tools(&["python3"], "apt-get install -y python3");
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("cri.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    let script = r#"python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("connected")' "$1""#;
    let out = capped_sh("+kill", script, &[sock.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("connected"));
    let (_conn, _) = listener.accept().unwrap();
}
