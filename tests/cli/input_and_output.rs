//! Every input file is opened one way and every output write can fail
//! without a panic: a FIFO, a character device, a directory or an oversize
//! file as qosd's config or the kubelet's is refused at once with an error
//! naming it; an error never echoes a line of the file; a full stdout ends
//! any command with exit 1 and a message; control characters in names never
//! reach text output raw. No root needed.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;

/// Files that are not regular text files of a sane size, each with the
/// words the refusal uses.
fn hostile_files(dir: &Path) -> Vec<(std::path::PathBuf, &'static str)> {
    let fifo = dir.join("fifo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let big = dir.join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(qosd_model::core::limits::MAX_INPUT_BYTES + 1)
        .unwrap();
    let sub = dir.join("adir");
    std::fs::create_dir(&sub).unwrap();
    vec![
        (fifo, "FIFO"),
        ("/dev/zero".into(), "character device"),
        (sub, "directory"),
        (big, "larger than"),
    ]
}

#[test]
fn special_and_oversize_files_are_refused_as_config_and_kubelet_config() {
    let tmp = tempfile::tempdir().unwrap();
    for (path, words) in hostile_files(tmp.path()) {
        let p = path.to_str().unwrap();
        for args in [
            vec!["config", "check", p],
            vec!["config", "check", "--kubelet-config", p],
        ] {
            let t = Instant::now();
            let (code, _out, err) = qosd_bounded(&args, Stdio::piped());
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(err.contains(p), "{args:?}: the error names the file: {err}");
            assert!(err.contains(words), "{args:?}: {err}");
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{args:?} took {:?}",
                t.elapsed()
            );
        }
    }
}

#[test]
fn special_files_in_the_kubelet_drop_in_dir_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("conf.d");
    std::fs::create_dir(&dir).unwrap();
    let fifo = dir.join("10-fifo.conf");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let (code, _out, err) = qosd_bounded(
        &[
            "config",
            "check",
            "--kubelet-config-dir",
            dir.to_str().unwrap(),
        ],
        Stdio::piped(),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("10-fifo.conf") && err.contains("FIFO"),
        "{err}"
    );
}

#[test]
fn a_shadow_style_file_as_config_is_not_echoed() {
    let tmp = tempfile::tempdir().unwrap();
    let f = write_file(
        tmp.path(),
        "shadow",
        "root:$6$abcdefgh$c2VjcmV0aGFzaGVkcGFzc3dvcmQ:19000:0:99999:7:::\nbin:*:19000:0:99999:7:::\n",
    );
    let (code, out, err) = qosd_bounded(&["config", "check", f.to_str().unwrap()], Stdio::piped());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(f.to_str().unwrap()), "{err}");
    for secret in ["$6$", "c2VjcmV0", "root:", "19000"] {
        assert!(
            !err.contains(secret) && !out.contains(secret),
            "{secret} echoed: {err}"
        );
    }
}

/// `qosd <args>` with stdout on `/dev/full` (every write fails with
/// ENOSPC), with a 20 s hang guard: (exit code, stderr).
fn qosd_to_dev_full(args: &[&str]) -> (i32, String) {
    use std::io::Read;
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut child = std::process::Command::new(qosd_bin())
        .args(args)
        .current_dir(repo_root())
        .env_remove("QOSD_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .stdin(Stdio::null())
        .stdout(full)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = String::new();
    // The pipe closes when qosd exits (or the guard below kills it).
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("qosd {args:?} still running after 20 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status.code().unwrap_or(-1), reader.join().unwrap())
}

#[test]
fn a_full_stdout_ends_every_command_with_exit_1_and_no_panic() {
    for args in [
        &["config", "check", "config/qosd.yaml"][..],
        &["config", "default"],
        &["plan"],
        &["plan", "-o", "json"],
        &["classify", "--pods", "fixtures/pods"],
        &[
            "eviction-order",
            "--pods",
            "fixtures/eviction/pods.yaml",
            "--usage",
            "fixtures/eviction/usage.json",
        ],
        &["completion", "bash"],
        &["man"],
    ] {
        let (code, err) = qosd_to_dev_full(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            err.contains("cannot write to standard output") && err.contains("No space left"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn control_characters_in_pod_names_never_reach_text_output_raw() {
    let tmp = tempfile::tempdir().unwrap();
    let m = write_file(
        tmp.path(),
        "evil.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"evil\\u001b[31mred\\nFAKE line\"\n  namespace: \"ns\\u0007\"\n  uid: 11111111-2222-3333-4444-555555555555\nspec:\n  containers:\n  - name: c\n    image: x\n",
    );
    let m = m.to_str().unwrap();
    for args in [
        vec!["classify", "--pods", m],
        vec!["classify", "--pods", m, "-o", "wide"],
        vec!["eviction-order", "--pods", m],
    ] {
        let (code, out, err) = qosd_bounded(&args, Stdio::piped());
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{7}'),
            "{args:?}: {out:?}"
        );
        assert!(!err.contains('\u{1b}'), "{args:?}: {err:?}");
        assert!(
            out.contains("evil\\u{1b}[31mred\\nFAKE line"),
            "{args:?}: {out:?}"
        );
        assert!(
            !out.lines().any(|l| l.starts_with("FAKE line")),
            "{args:?}: a forged line: {out:?}"
        );
    }
    // JSON keeps the name exactly (escaped by JSON itself).
    let (code, out, _) = qosd_bounded(&["classify", "--pods", m, "-o", "json"], Stdio::piped());
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        v.to_string().contains("evil\\u001b[31mred\\nFAKE line"),
        "{v}"
    );
}
