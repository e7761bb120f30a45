//! systemd/qosd.service: `systemd-analyze verify`, `systemd-analyze security
//! --offline=true` exposure ≤ 4.0, and the directives the issue requires.

use std::path::{Path, PathBuf};
use std::process::Command;

const MAX_EXPOSURE: f64 = 4.0;

fn unit_text() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/qosd.service");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `Key=value` lines of the unit (comments dropped), in order.
fn directives(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .filter(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn value<'a>(d: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    d.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// A copy of the unit whose ExecStart points at the freshly built binary
/// (verify insists the executable exists), named qosd.service.
fn unit_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let text = unit_text().replace("/usr/local/bin/qosd", env!("CARGO_BIN_EXE_qosd"));
    assert!(text.contains(env!("CARGO_BIN_EXE_qosd")));
    let path = dir.path().join("qosd.service");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// The version line of `systemd-analyze`; panics when it is not installed.
fn systemd_analyze() -> String {
    match Command::new("systemd-analyze").arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
        other => panic!(
            "systemd-analyze not usable ({:?}); scripts/test installs it as root: apt-get install -y systemd",
            other.map(|o| o.status)
        ),
    }
}

#[test]
fn unit_has_required_directives() {
    let d = directives(&unit_text());
    let one = |k: &str| {
        let v = value(&d, k);
        assert_eq!(v.len(), 1, "{k} should be set exactly once, got {v:?}");
        v[0].to_string()
    };
    assert_eq!(one("Type"), "notify");
    assert_eq!(one("Restart"), "on-failure");
    assert_eq!(one("OOMScoreAdjust"), "-999");
    assert_eq!(one("ProtectSystem"), "strict");
    // Writable: the kubepods cgroups only (issue 15; proved live in
    // tests/vm/systemd_vm.rs), the rest of the cgroup tree read-only.
    assert_eq!(one("ReadOnlyPaths"), "/sys/fs/cgroup");
    let rw = value(&d, "ReadWritePaths").join(" ");
    for p in ["-/sys/fs/cgroup/kubepods.slice", "-/sys/fs/cgroup/kubepods"] {
        assert!(
            rw.split_whitespace().any(|w| w == p),
            "{p} not in ReadWritePaths {rw}"
        );
    }
    assert!(
        !rw.split_whitespace()
            .any(|w| w.trim_start_matches('-') == "/sys/fs/cgroup"),
        "the whole cgroup tree is writable: {rw}"
    );
    // cgroup v1: every hierarchy qosd writes (cpu, memory, pids, hugetlb)
    // or removes orphaned pod cgroups from (all of them), both namings.
    for h in [
        "cpu,cpuacct",
        "memory",
        "pids",
        "hugetlb",
        "blkio",
        "cpuset",
        "devices",
        "freezer",
        "misc",
        "net_cls,net_prio",
        "perf_event",
        "rdma",
        "systemd",
        "unified",
    ] {
        for name in ["kubepods", "kubepods.slice"] {
            let p = format!("-/sys/fs/cgroup/{h}/{name}");
            assert!(
                rw.split_whitespace().any(|w| w == p),
                "{p} not in ReadWritePaths {rw}"
            );
        }
    }
    // A bad config (exit 2) stops the unit instead of looping; other
    // failures restart, within a start limit.
    assert_eq!(one("RestartPreventExitStatus"), "2");
    let burst: u32 = one("StartLimitBurst").parse().unwrap();
    assert!((1..=20).contains(&burst), "StartLimitBurst={burst}");
    let interval =
        qosd_config::parse_go_duration(&one("StartLimitIntervalSec").replace("min", "m"))
            .expect("StartLimitIntervalSec parses");
    assert!(interval.as_secs() >= 60, "no start limit: {interval:?}");
    // After= a target needs Wants= it (or it orders against nothing); no
    // slice is pulled in (it would be created empty on cgroupfs nodes).
    let after = value(&d, "After").join(" ");
    let wants = value(&d, "Wants").join(" ");
    for a in after.split_whitespace() {
        if a.ends_with(".target") && a != "local-fs.target" {
            assert!(
                wants.split_whitespace().any(|w| w == a),
                "After={a} without Wants={a}"
            );
        }
    }
    assert!(!wants.contains("kubepods.slice"), "Wants={wants}");
    assert!(
        value(&d, "Documentation").contains(&"man:qosd(1)"),
        "no man page in Documentation="
    );
    // The CRI status cache's directory (qosd's default stateDir).
    assert_eq!(one("StateDirectory"), "qosd");
    assert_eq!(one("MemoryMin"), "32M");
    assert_eq!(one("CapabilityBoundingSet"), "CAP_KILL");
    assert_eq!(one("RestrictAddressFamilies"), "AF_UNIX AF_INET AF_INET6");
    assert_eq!(one("User"), "root");
    assert_ne!(
        one("ProtectControlGroups"),
        "yes",
        "would make /sys/fs/cgroup read-only"
    );
    for k in [
        "ProtectHome",
        "PrivateTmp",
        "NoNewPrivileges",
        "ProtectKernelModules",
        "ProtectKernelTunables",
        "LockPersonality",
        "MemoryDenyWriteExecute",
        "RestrictRealtime",
        "RestrictNamespaces",
        "RestrictSUIDSGID",
        "PrivateDevices",
    ] {
        assert_eq!(one(k), "yes", "{k}");
    }
    assert_eq!(one("SystemCallArchitectures"), "native");
    let filters = value(&d, "SystemCallFilter");
    assert_eq!(filters.first(), Some(&"@system-service"), "{filters:?}");
    assert!(filters
        .iter()
        .any(|f| f.starts_with('~') && f.contains("@privileged")));
    // Watchdog: a positive duration the daemon can feed.
    let wd = one("WatchdogSec");
    let secs: u64 = wd
        .strip_suffix('s')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("WatchdogSec={wd}: whole seconds expected"));
    assert!(secs >= 10, "WatchdogSec={wd} too tight");
    // ExecStart runs `qosd run` with the documented config path.
    let exec = one("ExecStart");
    assert!(
        exec.starts_with("/usr/local/bin/qosd run ") && exec.contains("/etc/qosd/config.yaml"),
        "{exec}"
    );
}

#[test]
#[ignore = "needs root: systemd-analyze (scripts/test installs systemd as root)"]
fn systemd_analyze_verify_passes() {
    let version = systemd_analyze();
    let (_dir, unit) = unit_copy();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{version}: verify failed:\n{stderr}");
    // Warnings about our unit (unknown directive, bad value) fail the test too.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("qosd.service"))
        .collect();
    assert!(ours.is_empty(), "{version}: verify warnings:\n{stderr}");
}

#[test]
#[ignore = "needs root: systemd-analyze (scripts/test installs systemd as root)"]
fn systemd_analyze_verify_catches_a_broken_unit() {
    // The check above can fail: a typo'd directive is reported.
    systemd_analyze();
    let (dir, unit) = unit_copy();
    let text = std::fs::read_to_string(&unit)
        .unwrap()
        .replace("Type=notify", "Type=notifyy");
    std::fs::write(&unit, text).unwrap();
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() || stderr.contains("notifyy"),
        "broken unit not reported: {stderr}"
    );
    drop(dir);
}

/// `systemd-analyze security --offline=true` overall exposure.
fn exposure(unit: &Path) -> (f64, String) {
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(unit)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "security failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no exposure line in:\n{stdout}"));
    let score: f64 = line
        .split(':')
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse {line:?}"));
    (score, stdout)
}

#[test]
#[ignore = "needs root: systemd-analyze (scripts/test installs systemd as root)"]
fn security_exposure_is_at_most_4() {
    let version = systemd_analyze();
    let (_dir, unit) = unit_copy();
    let (score, report) = exposure(&unit);
    println!("{version}: qosd.service exposure {score}");
    assert!(
        score <= MAX_EXPOSURE,
        "exposure {score} > {MAX_EXPOSURE}:\n{report}"
    );
    // The documented score is the one measured (with the systemd that
    // docs/operations.md names; other versions weigh options differently).
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    if version.starts_with("systemd 252") {
        assert!(
            doc.contains(&format!("exposure level **{score:.1}**")),
            "docs/operations.md does not record the measured exposure {score:.1}"
        );
    }

    // And the score is sensitive to the hardening: without it, it rises.
    let bare = std::fs::read_to_string(&unit)
        .unwrap()
        .lines()
        .filter(|l| {
            !l.starts_with("Protect") && !l.starts_with("Restrict") && !l.starts_with("SystemCall")
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(&unit, bare).unwrap();
    let (bare_score, _) = exposure(&unit);
    assert!(
        bare_score > score + 1.0,
        "bare {bare_score} vs hardened {score}"
    );
}

// --- System call filter ------------------------------------------------------

/// Expand a `SystemCallFilter=` group (or a plain name) with
/// `systemd-analyze syscall-filter`.
fn expand(item: &str, out: &mut std::collections::BTreeSet<String>) {
    if !item.starts_with('@') {
        out.insert(item.to_string());
        return;
    }
    let o = Command::new("systemd-analyze")
        .args(["syscall-filter", "--no-pager", item])
        .output()
        .unwrap();
    assert!(o.status.success(), "syscall-filter {item} failed");
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    for line in text.lines().skip(1) {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if l.starts_with('@') {
            expand(l, out);
        } else {
            out.insert(l.to_string());
        }
    }
}

/// The system calls the unit's `SystemCallFilter=` lines allow: the first
/// (allow) list minus every later `~` (deny) list, plus later allow lines.
pub fn allowed_syscalls(unit_text: &str) -> std::collections::BTreeSet<String> {
    let mut allowed = std::collections::BTreeSet::new();
    for (i, f) in value(&directives(unit_text), "SystemCallFilter")
        .into_iter()
        .enumerate()
    {
        let (deny, list) = match f.strip_prefix('~') {
            Some(rest) => (true, rest),
            None => (false, f),
        };
        assert!(
            i > 0 || !deny,
            "first SystemCallFilter= should be an allow list"
        );
        let mut set = std::collections::BTreeSet::new();
        for item in list.split_whitespace() {
            expand(item, &mut set);
        }
        if deny {
            allowed.retain(|s| !set.contains(s));
        } else {
            allowed.extend(set);
        }
    }
    allowed
}

/// System calls made by `cmd` (and its threads), traced with strace.
fn traced_syscalls(cmd: &mut Command) -> std::collections::BTreeSet<String> {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.txt");
    let program = cmd.get_program().to_owned();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&log)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "traced command failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    text.lines()
        .filter_map(|l| l.split_once(' ').map(|(_, rest)| rest.trim_start()))
        .filter(|rest| {
            !rest.starts_with('<') && !rest.starts_with("+++") && !rest.starts_with("---")
        })
        .filter_map(|rest| rest.split_once('(').map(|(name, _)| name.to_string()))
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

#[test]
#[ignore = "needs root: systemd-analyze and strace (scripts/test installs them as root)"]
fn traced_syscalls_pass_the_units_filter() {
    systemd_analyze();
    assert!(
        Command::new("strace").arg("-V").output().is_ok(),
        "strace not installed; scripts/test installs it as root: apt-get install -y strace"
    );
    let allowed = allowed_syscalls(&unit_text());
    for must in [
        "kill",
        "epoll_wait",
        "openat",
        "write",
        "connect",
        "eventfd2",
        "inotify_add_watch",
    ] {
        assert!(allowed.contains(must), "{must} not allowed by the filter");
    }
    for denied in [
        "mount",
        "reboot",
        "init_module",
        "setuid",
        "ptrace",
        "setrlimit",
    ] {
        assert!(!allowed.contains(denied), "{denied} should be filtered");
    }
    // Representative workloads: config loading, and the tokio/hyper HTTP
    // server answering real requests (its test in the qosd binary).
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut used = traced_syscalls(
        Command::new(env!("CARGO_BIN_EXE_qosd"))
            .args(["config", "check", "-q"])
            .arg(manifest.join("config/qosd.yaml")),
    );
    // The HTTP server's own test (a unit test of the qosd binary): the test
    // harness among the `qosd-*` executables beside this one (the binary
    // itself is there too; it lists no tests), the newest if several.
    const HTTP_TEST: &str = "system_tests::ship_http::endpoints_follow_daemon_state";
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let mut harnesses: Vec<(std::time::SystemTime, std::path::PathBuf)> = deps
        .read_dir()
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("qosd-") && p.extension().is_none()
        })
        .filter(|p| {
            Command::new(p)
                .args(["--list", "--format", "terse", HTTP_TEST, "--exact"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(HTTP_TEST))
        })
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    harnesses.sort();
    match harnesses.pop() {
        Some((_, bin)) => used.extend(traced_syscalls(Command::new(bin).args([
            HTTP_TEST,
            "--exact",
            "--test-threads=1",
        ]))),
        None => {
            eprintln!("note: the qosd unit-test binary is not built; tracing config check only")
        }
    }
    // Extra syscalls of a `qosd run --once` trace, when the caller supplies one
    // (QOSD_TRACE_RUN="run --once --dry-run ...").
    if let Ok(args) = std::env::var("QOSD_TRACE_RUN") {
        used.extend(traced_syscalls(
            Command::new(env!("CARGO_BIN_EXE_qosd")).args(args.split_whitespace()),
        ));
    }
    println!("{} distinct syscalls traced: {used:?}", used.len());
    assert!(used.len() > 20 && (used.contains("epoll_wait") || used.contains("epoll_pwait")));
    // The comparison can fail: a unit denying @io-event would block tokio.
    let stricter = format!("{}\nSystemCallFilter=~@io-event\n", unit_text());
    let strict_allowed = allowed_syscalls(&stricter);
    assert!(used.iter().any(|s| !strict_allowed.contains(s)));

    let blocked: Vec<&String> = used.iter().filter(|s| !allowed.contains(*s)).collect();
    // The test harness itself may use a few extra calls; list them precisely.
    assert!(
        blocked.is_empty(),
        "syscalls the unit would refuse: {blocked:?} (used: {used:?})"
    );
}
