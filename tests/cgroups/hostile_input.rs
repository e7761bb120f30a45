//! Hostile input never hangs, exhausts or fools qosd (issue 13): the
//! reproducers of the reliability campaign, each asserting the fixed
//! behaviour. No root needed.
//!
//! * out-of-range durations and reservation sums: exit 2 naming the field;
//! * a FIFO or `/dev/zero` as `--config` or a manifest: refused at once;
//! * deeply nested YAML (config and manifest): refused before parsing;
//! * manifest uids validated like CRI uids; duplicate uids refused naming
//!   both files; a symlink loop lists each pod once;
//! * a full or closed stderr does not turn an error into a panic (exit 101);
//! * the status client caps the body and keeps its total deadline.

use crate::support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

/// `qosd <args>` with a 20 s hang guard: (exit code, stdout, stderr).
fn qosd(args: &[&str]) -> (i32, String, String) {
    qosd_bounded(args, Stdio::piped())
}

const NODE: &[&str] = NODE_4CPU_8GI_V2;

fn pod(name: &str, uid: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  uid: {uid}\nspec:\n  containers:\n  - name: c\n    image: x\n"
    )
}

#[test]
fn out_of_range_durations_exit_2_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    for (field, value) in [
        ("reconcileInterval", "2562048h"),
        ("reconcileInterval", "9223372036854775808ns"),
        ("evictionPressureTransitionPeriod", "99999999999999999999h"),
    ] {
        let c = write_file(tmp.path(), "c.yaml", &format!("{field}: {value}\n"));
        let (code, _, err) = qosd(&["config", "check", c.to_str().unwrap()]);
        assert_eq!(code, 2, "{field}: {value}: {err}");
        assert!(err.contains(field) && err.contains("too large"), "{err}");
    }
}

#[test]
fn reservation_sums_out_of_range_exit_2() {
    let (code, out, err) = qosd(&[
        "plan",
        "--system-reserved",
        "cpu=9223372036854775807,memory=7Ei",
        "--kube-reserved",
        "cpu=9223372036854775807,memory=7Ei",
        "--node-cpu",
        "4",
        "--node-memory",
        "8Gi",
        "--cgroup-version",
        "v1",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("systemReserved + kubeReserved")
            && err.contains("--system-reserved + --kube-reserved")
            && err.contains("out of range"),
        "{err}"
    );
    assert!(out.is_empty(), "nothing planned: {out}");
}

#[test]
fn special_files_are_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("config.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let fifo_yaml = tmp.path().join("pods.yaml");
    nix::unistd::mkfifo(&fifo_yaml, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (code, _, err) = qosd(&["config", "check", fifo.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("FIFO, not a regular file"), "{err}");
    let (code, _, err) = qosd(&["config", "check", "/dev/zero"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("character device"), "{err}");
    let mut args = vec!["plan", "--pods", fifo_yaml.to_str().unwrap()];
    args.extend_from_slice(NODE);
    let (code, _, err) = qosd(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("FIFO"), "{err}");
    let mut args = vec!["plan", "--pods", "/dev/zero"];
    args.extend_from_slice(NODE);
    let (code, _, err) = qosd(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("character device"), "{err}");
    // A big regular file is refused by size, not read into memory.
    let big = tmp.path().join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(64 << 20).unwrap();
    let (code, _, err) = qosd(&["config", "check", big.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("larger than"), "{err}");
}

#[test]
fn deep_nesting_is_refused_before_parsing() {
    let tmp = tempfile::tempdir().unwrap();
    let flow = format!("evictionHard: {}\n", "[".repeat(200_000));
    let c = write_file(tmp.path(), "deep.yaml", &flow);
    let (code, _, err) = qosd(&["config", "check", c.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nested more than 64 levels"), "{err}");
    let mut block = String::from("apiVersion: v1\nkind: Pod\nmetadata:\n");
    for d in 1..600 {
        block.push_str(&" ".repeat(d));
        block.push_str("a:\n");
    }
    let m = write_file(tmp.path(), "deep-pod.yaml", &block);
    let mut args = vec!["plan", "--pods", m.to_str().unwrap()];
    args.extend_from_slice(NODE);
    let (code, _, err) = qosd(&args);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("deep-pod.yaml") && err.contains("nested more than"),
        "{err}"
    );
}

#[test]
fn manifest_uids_are_validated_like_cri_uids() {
    let tmp = tempfile::tempdir().unwrap();
    let m = write_file(tmp.path(), "evil.yaml", &pod("evil", "../../../../x"));
    let mut args = vec!["plan", "--pods", m.to_str().unwrap()];
    args.extend_from_slice(NODE);
    let (code, out, err) = qosd(&args);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("metadata.uid") && err.contains("not a plain UID"),
        "{err}"
    );
    assert!(!out.contains(".."), "{out}");
}

#[test]
fn duplicate_uids_are_refused_naming_both_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let uid = "0b0a8c1e-1111-2222-3333-444455556666";
    let a = write_file(tmp.path(), "a.yaml", &pod("first", uid));
    let b = write_file(tmp.path(), "b.yaml", &pod("second", uid));
    let mut args = vec!["plan", "--pods", a.to_str().unwrap(), b.to_str().unwrap()];
    args.extend_from_slice(NODE);
    let (code, _, err) = qosd(&args);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("a.yaml") && err.contains("b.yaml") && err.contains("must be unique"),
        "{err}"
    );
}

#[test]
fn symlink_loops_list_each_pod_once() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pods");
    std::fs::create_dir(&dir).unwrap();
    write_file(
        &dir,
        "p.yaml",
        &pod("only", "0b0a8c1e-1111-2222-3333-444455556666"),
    );
    std::os::unix::fs::symlink(&dir, dir.join("loop")).unwrap();
    std::os::unix::fs::symlink(dir.join("p.yaml"), dir.join("again.yaml")).unwrap();
    let (code, out, err) = qosd(&[
        "classify",
        "--pods",
        dir.to_str().unwrap(),
        dir.join("p.yaml").to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("\"only\"").count(), 1, "{out}");
}

#[test]
fn a_broken_stderr_never_turns_into_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let c = write_file(tmp.path(), "bad.yaml", "mode: yolo\n");
    // stderr on a full device: the error line is lost, the exit code stays.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let (code, _, _) = qosd_bounded(&["config", "check", c.to_str().unwrap()], full.into());
    assert_eq!(code, 2, "exit 101 would be a panic on the failed write");
    // stderr a pipe nobody reads any more: EPIPE.
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let (code, _, _) = qosd_bounded(
        &["config", "check", c.to_str().unwrap()],
        std::fs::File::from(w).into(),
    );
    assert_eq!(code, 2);
}

/// A server that answers with `head` and then `body_chunk` forever, each
/// chunk after `pause`.
fn hostile_server(
    head: &'static [u8],
    chunk: &'static [u8],
    pause: Duration,
) -> std::net::SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req);
            if s.write_all(head).is_err() {
                return;
            }
            loop {
                if s.write_all(chunk).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        }
    });
    addr
}

#[test]
fn status_client_caps_the_body_and_keeps_its_deadline() {
    static BIG: [u8; 1 << 16] = [b'x'; 1 << 16];
    let endless = hostile_server(b"HTTP/1.1 200 OK\r\n\r\n", &BIG, Duration::ZERO);
    let e = support::http::get(endless, "/status", Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert!(e.contains("larger than"), "{e}");
    let trickle = hostile_server(b"HTTP/1.1 200 OK\r\n\r\n", b"x", Duration::from_millis(50));
    let t = Instant::now();
    let e = support::http::get(trickle, "/status", Duration::from_millis(500))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no complete answer within 0.5s"), "{e}");
    // Hang guard only: the deadline is total, not per read.
    assert!(t.elapsed() < Duration::from_secs(20));
}

#[test]
fn extreme_quantities_never_wrap_in_the_plan() {
    // Debug test builds panic on any overflow: this plans pods at the edge
    // of every quantity and checks no written value is negative.
    let tmp = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for (i, (cpu, mem)) in [
        ("9223372036854775807", "7Ei"),
        ("9223372036854775807", "7Ei"),
        ("1n", "1"),
    ]
    .iter()
    .enumerate()
    {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p{i}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests: {{cpu: \"{cpu}\", memory: \"{mem}\"}}\n      limits: {{cpu: \"{cpu}\", memory: \"{mem}\"}}\n"
        ));
    }
    let m = write_file(tmp.path(), "edge.yaml", &text);
    for version in ["v1", "v2"] {
        let (code, out, err) = qosd(&[
            "plan",
            "--pods",
            m.to_str().unwrap(),
            "--node-cpu",
            "9223372036854775807",
            "--node-memory",
            "7Ei",
            "--cgroup-version",
            version,
            "--output",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(!out.contains("\"-"), "a negative value was planned:\n{out}");
    }
}

/// A cgroup root missing in every cgroup v1 hierarchy is reported for
/// every hierarchy in one run (not one per attempt), and nothing is written.
#[test]
fn a_missing_cgroup_root_is_reported_for_every_hierarchy_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cg = dir.path().join("cgroup");
    for h in ["cpu,cpuacct", "memory", "pids"] {
        std::fs::create_dir_all(cg.join(h)).unwrap();
    }
    let root = dir.path().join("kubelet");
    std::fs::create_dir_all(&root).unwrap();
    let pods = repo_root().join("fixtures/pods");
    let (code, _out, err) = qosd_bounded(
        &[
            "run",
            "--once",
            "--mode",
            "enforce",
            "--pods",
            pods.to_str().unwrap(),
            "--cgroupfs",
            cg.to_str().unwrap(),
            "--cgroup-version",
            "v1",
            "--cgroup-root",
            "/qosd-test-missing-root",
            "--node-cpu",
            "4",
            "--node-memory",
            "8Gi",
            "--root-dir",
            root.to_str().unwrap(),
        ],
        Stdio::piped(),
    );
    assert_ne!(code, 0, "{err}");
    for h in ["cpu,cpuacct", "memory", "pids"] {
        let dir = cg.join(h).join("qosd-test-missing-root");
        assert!(
            err.contains(&format!("does not exist at {}", dir.display())),
            "{h} not reported: {err}"
        );
    }
    assert!(
        !cg.join("memory/qosd-test-missing-root").exists(),
        "nothing created"
    );
}
