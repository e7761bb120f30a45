//! Issue 12 without root: every command's `-o json` against its contract
//! (docs/contracts), a live `/metrics` scrape checked by `promtool check
//! metrics` (text format) and a strict OpenMetrics parser (the Prometheus
//! Python client's), docs/operations.md against the metric registry and the
//! error kinds, workloads by pod template, empty `--pods`, completions.

use crate::support;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::*;

const NODE: &[&str] = &[
    "--config",
    "/dev/null",
    "--node-cpu",
    "8",
    "--node-memory",
    "32Gi",
    "--hugepage-sizes",
    "none",
];

/// A fake v1 cgroupfs with the controller directories (dry runs only).
fn fake_cgroupfs(dir: &Path) -> PathBuf {
    let fs = dir.join("cgroup");
    for c in ["cpu", "cpuacct", "memory", "pids", "cpuset", "hugetlb"] {
        std::fs::create_dir_all(fs.join(c)).unwrap();
    }
    fs
}

#[test]
fn every_json_output_matches_its_contract() {
    let plan = |extra: &[&str]| {
        let mut a = vec!["plan", "--pods", "fixtures/pods", "--cgroup-version", "v2"];
        a.extend_from_slice(NODE);
        a.extend_from_slice(extra);
        qosd(&a)
    };
    let (code, json, err) = plan(&["-o", "json"]);
    assert_eq!(code, 0, "{err}");
    check_contract("plan", &json);
    // YAML is the same document.
    let (code, yaml, err) = plan(&["-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    let from_yaml: serde_json::Value = yaml_serde::from_str(&yaml).unwrap();
    let from_json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(from_yaml, from_json);

    let (code, json, err) = qosd(&["classify", "--pods", "fixtures/pods", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    check_schema("classify", &json);

    let (code, json, err) = qosd(&[
        "eviction-order",
        "--pods",
        "fixtures/pods",
        "--signal",
        "pid.available",
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    check_contract("eviction-order", &json);

    let tmp = tempfile::tempdir().unwrap();
    let fs = fake_cgroupfs(tmp.path());
    let mut args = vec![
        "run",
        "--once",
        "--dry-run",
        "--pods",
        "fixtures/pods",
        "--cgroup-version",
        "v1",
        "--cgroupfs",
        fs.to_str().unwrap(),
        "-o",
        "json",
    ];
    args.extend_from_slice(NODE);
    let (code, json, err) = qosd(&args);
    assert_eq!(code, 0, "{err}");
    check_contract("run-once", &json);
    assert!(
        std::fs::read_dir(fs.join("memory"))
            .unwrap()
            .next()
            .is_none(),
        "dry run created something"
    );

    // No daemon and no runtime: exit 1, but the live document is printed.
    let addr = format!("127.0.0.1:{}", free_port());
    let sock = format!("unix://{}", tmp.path().join("none.sock").display());
    let (code, json, err) = qosd(&[
        "status",
        "--config",
        "/dev/null",
        "--address",
        &addr,
        "--runtime-endpoint",
        &sock,
        "--timeout",
        "300ms",
        "-o",
        "json",
    ]);
    assert_eq!(code, 1, "{err}");
    check_schema("status", &json);
    // What is not known is said so: no pod counts, the configured enforcement.
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["pods_unknown"], true, "{json}");
    assert_eq!(doc["cgroup_enforcement"], "enforce", "{json}");
    assert!(doc.get("generated_at_ms").is_some(), "{json}");
    let (code, text, err) = qosd(&[
        "status",
        "--config",
        "/dev/null",
        "--address",
        &addr,
        "--runtime-endpoint",
        &sock,
        "--timeout",
        "300ms",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(text.contains("pods: unknown\n"), "{text}");
    assert!(!text.contains("Guaranteed 0"), "{text}");
}

#[test]
fn workloads_are_read_by_pod_template_and_said_so() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("deploy.yaml");
    std::fs::write(
        &f,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  replicas: 3\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers:\n      - name: app\n        resources: {limits: {cpu: 500m, memory: 256Mi}}\n---\napiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n  schedule: '0 3 * * *'\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers: [{name: job}]\n",
    )
    .unwrap();
    let (code, out, err) = qosd(&["classify", "--pods", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("shop/web (template of Deployment/web)") && out.contains("Guaranteed"),
        "{out}"
    );
    assert!(
        out.contains("default/nightly (template of CronJob/nightly)"),
        "{out}"
    );
    assert!(
        err.contains("2 pod(s) come from workload pod templates"),
        "{err}"
    );
    let mut args = vec![
        "plan",
        "--pods",
        f.to_str().unwrap(),
        "--cgroup-version",
        "v1",
    ];
    args.extend_from_slice(NODE);
    args.extend_from_slice(&["-o", "json"]);
    let (code, json, err) = qosd(&args);
    assert_eq!(code, 0, "{err}");
    check_contract("plan", &json);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&json).unwrap()["pods"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn explicit_pods_without_a_pod_are_a_warning_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().to_str().unwrap();
    let (code, out, err) = qosd(&["classify", "--pods", empty]);
    assert_eq!(code, 2, "{out}{err}");
    assert_eq!(out, "");
    assert!(err.contains("warning: no pod in"), "{err}");
}

#[test]
fn text_output_is_aligned_and_wide_adds_columns() {
    let (code, out, err) = qosd(&["classify", "--pods", "fixtures/pods", "-o", "wide"]);
    assert_eq!(code, 0, "{err}");
    let head = out.lines().next().unwrap();
    assert!(head.starts_with("POD") && head.contains("UID") && head.contains("MANIFEST"));
    let col = head.find("QOS").unwrap();
    for l in out.lines().skip(1) {
        assert!(
            ["Guaranteed", "Burstable", "BestEffort"]
                .iter()
                .any(|q| l[col..].starts_with(q)),
            "QOS column not aligned: {l:?}\n{out}"
        );
    }
}

#[test]
fn completions_and_man_page_come_from_the_cli() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = qosd(&["completion", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("eviction-order"), "{shell}");
        assert!(out.contains("runtime-endpoint"), "{shell}");
    }
    let (code, out, err) = qosd(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with(".ie") || out.contains(".TH qosd"), "{out}");
    assert!(out.contains(".SS \"qosd plan\"") && out.contains("\\-\\-cgroup\\-root"));
}

#[test]
fn durations_are_go_durations_everywhere() {
    let (code, _, err) = qosd(&[
        "pods",
        "--retry-for",
        "1 s",
        "--runtime-endpoint",
        "unix:///nonexistent.sock",
    ]);
    assert_eq!(code, 2, "humantime spelling must be refused: {err}");
    let (code, _, err) = qosd(&[
        "pods",
        "--retry-for",
        "0s",
        "--timeout",
        "200ms",
        "--runtime-endpoint",
        "unix:///nonexistent/qosd.sock",
    ]);
    assert_eq!(code, 1, "{err}");
}

// ------------------------------------------------------------- live scrape

/// GET `path` with an `Accept` header; (content type, body).
fn get_with_accept(port: u16, path: &str, accept: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let ct = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default();
    (ct, body.to_string())
}

fn pipe(cmd: &mut Command, input: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The Python with `prometheus_client` (Debian's python3-prometheus-client).
fn python_with_client() -> PathBuf {
    for py in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(py)
            .args(["-c", "import prometheus_client.openmetrics.parser"])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return PathBuf::from(py);
        }
    }
    panic!("python3 with prometheus_client not found: apt-get install python3-prometheus-client (scripts/test installs it)");
}

#[test]
#[ignore = "needs root: promtool and python3-prometheus-client, which scripts/test installs as root"]
fn live_scrape_passes_promtool_and_a_strict_openmetrics_parser() {
    require_tools(&["promtool"], "apt-get install -y prometheus");
    let promtool = which("promtool").unwrap();
    let python = python_with_client();
    let tmp = tempfile::tempdir().unwrap();
    let fs = fake_cgroupfs(tmp.path());
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut args = vec![
        "run",
        "--dry-run",
        "--pods",
        "fixtures/pods",
        "--cgroup-version",
        "v1",
        "--cgroupfs",
        fs.to_str().unwrap(),
        "--root-dir",
        tmp.path().to_str().unwrap(),
        "--metrics-address",
        &addr,
        "--reconcile-interval",
        "1s",
    ];
    args.extend_from_slice(NODE);
    let child = Command::new(support::qosd_bin())
        .current_dir(repo_root())
        .args(&args)
        .env_remove("QOSD_CONFIG")
        .env("QOSD_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let _d = TermOnDrop(child);
    let t = Instant::now();
    while status_json(port)["last_reconcile"].is_null() {
        assert!(t.elapsed() < Duration::from_secs(30), "no reconcile");
        std::thread::sleep(Duration::from_millis(100));
    }

    // ... and an eviction pass that read the nodefs signals (bytes, inodes).
    let t = Instant::now();
    while !get_with_accept(port, "/metrics", "text/plain")
        .1
        .contains("qosd_signal_available_inodes{")
    {
        assert!(t.elapsed() < Duration::from_secs(30), "no signal observed");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Prometheus text format 0.0.4 for a client that asks for it.
    let (ct, text) = get_with_accept(port, "/metrics", "text/plain;version=0.0.4");
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let out = pipe(Command::new(&promtool).args(["check", "metrics"]), &text);
    assert!(
        out.status.success(),
        "promtool check metrics failed ({}):\n{}{}\n--- scrape ---\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Dry run is counted apart: the real write counter stays 0.
    assert!(text.contains("\nqosd_cgroup_writes_total 0\n"), "{text}");
    assert!(
        !text.contains("\nqosd_dry_run_cgroup_writes_total 0\n"),
        "{text}"
    );
    assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");

    // OpenMetrics for a client that prefers it (what Prometheus sends).
    let (ct, om) = get_with_accept(
        port,
        "/metrics",
        "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    );
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let script = "import sys\nfrom prometheus_client.openmetrics.parser import text_string_to_metric_families as p\nfams = list(p(sys.stdin.read()))\nprint(len(fams))\nfor f in fams:\n    print(f.name, f.type, f.unit)\n";
    let out = pipe(Command::new(&python).args(["-c", script]), &om);
    assert!(
        out.status.success(),
        "OpenMetrics parser rejected the scrape:\n{}\n--- scrape ---\n{om}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed = String::from_utf8_lossy(&out.stdout);
    for fam in [
        "qosd_signal_available_inodes gauge inodes",
        "qosd_signal_available_bytes gauge bytes",
        "qosd_eviction_threshold_inodes gauge inodes",
        "qosd_eviction_reaction_seconds histogram seconds",
    ] {
        assert!(parsed.contains(fam), "{fam} not in\n{parsed}");
    }
    assert!(
        parsed.contains("process_cpu_seconds counter seconds"),
        "{parsed}"
    );
}

/// docs/operations.md lists exactly the families the registry exposes and
/// exactly the error kinds the code counts.
#[test]
fn docs_list_every_metric_and_error_kind() {
    let doc = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap();
    let section = |title: &str| -> Vec<String> {
        let start = doc.find(title).unwrap_or_else(|| panic!("no {title:?}"));
        doc[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2)
            .filter_map(|l| l.split('`').nth(1).map(str::to_string))
            .collect()
    };
    let mut documented = section("## Metrics reference");
    documented.sort();
    let mut registry: Vec<String> = crate::telemetry::metrics::FAMILIES
        .iter()
        .map(|s| s.to_string())
        .collect();
    registry.sort();
    assert_eq!(documented, registry, "docs/operations.md metrics table");
    // The registry really exposes those families (with samples for each).
    let m = crate::telemetry::metrics::Metrics::new();
    m.eviction(
        "pid.available",
        qosd_model::core::model::QosClass::BestEffort,
        false,
    );
    let text = m.encode_prometheus();
    for f in [
        "qosd_errors_total",
        "qosd_pods",
        "process_open_fds",
        "qosd_evictions_total",
    ] {
        assert!(text.contains(&format!("# TYPE {f} ")), "{f}");
    }
    let mut kinds = section("Error kinds");
    kinds.sort();
    let mut code: Vec<String> = crate::telemetry::metrics::ErrorKind::ALL
        .iter()
        .map(|k| k.as_str().to_string())
        .collect();
    code.sort();
    assert_eq!(kinds, code, "docs/operations.md error kinds");
}
