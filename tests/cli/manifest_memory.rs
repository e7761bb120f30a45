//! Memory for big inputs: a pod list of several megabytes is read one item
//! at a time, so `qosd plan`'s peak resident memory stays within 16× the
//! file's size and under the DaemonSet's 128Mi limit
//! (deploy/base/daemonset.yaml). Each case runs the real binary and reads
//! its peak RSS from `wait4`; the plan must cover every pod of the file,
//! so a run that parsed nothing cannot pass.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::process::NODE_4CPU_8GI_V2 as NODE;

/// The DaemonSet's memory limit.
const DAEMONSET_LIMIT: u64 = 128 << 20;
/// Peak RSS allowed per byte of input.
const MAX_RATIO: u64 = 16;

/// The pod (as `kubectl get pods -o json` prints one) with index `i`.
fn pod_json(i: usize) -> String {
    format!(
        r#"{{
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {{
        "annotations": {{"kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z"}},
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {{"app": "web", "pod-template-hash": "5d8f7c9b4"}},
        "name": "web-{i:07}",
        "namespace": "shop",
        "uid": "00000000-0000-4000-8000-{i:012}"
    }},
    "spec": {{
        "containers": [
            {{
                "env": [{{"name": "MODE", "value": "production"}}],
                "image": "registry.example/app:1.2.3",
                "name": "app",
                "ports": [{{"containerPort": 8080, "protocol": "TCP"}}],
                "resources": {{
                    "limits": {{"cpu": "500m", "memory": "512Mi"}},
                    "requests": {{"cpu": "250m", "memory": "256Mi"}}
                }}
            }}
        ],
        "nodeName": "node-1",
        "priority": 0
    }},
    "status": {{"phase": "Running", "qosClass": "Burstable"}}
}}"#
    )
}

/// The same pod in YAML, each line prefixed by `indent` (the first line
/// by `first` instead).
fn pod_yaml(i: usize, first: &str, indent: &str) -> String {
    let body = format!(
        "apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubectl.kubernetes.io/restartedAt: \"2026-01-01T00:00:00Z\"
  creationTimestamp: \"2026-01-01T00:00:00Z\"
  labels:
    app: web
    pod-template-hash: 5d8f7c9b4
  name: web-{i:07}
  namespace: shop
  uid: 00000000-0000-4000-8000-{i:012}
spec:
  containers:
  - env:
    - name: MODE
      value: production
    image: registry.example/app:1.2.3
    name: app
    ports:
    - containerPort: 8080
      protocol: TCP
    resources:
      limits:
        cpu: 500m
        memory: 512Mi
      requests:
        cpu: 250m
        memory: 256Mi
  nodeName: node-1
  priority: 0
status:
  phase: Running
  qosClass: Burstable
"
    );
    let mut out = String::new();
    for (n, line) in body.lines().enumerate() {
        out.push_str(if n == 0 { first } else { indent });
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Shape {
    /// `kubectl get pods -o json`: a `List`, `kind` after `items`.
    JsonList,
    /// `kubectl get pods -o yaml`: a `List` in one YAML document.
    YamlList,
    /// One pod per YAML document.
    YamlDocs,
}

/// A pod list of about `bytes` bytes; its path and the number of pods.
/// Written as it is made: this process stays small (see [`plan_peak_rss`]).
fn generate(dir: &Path, shape: Shape, bytes: usize) -> (PathBuf, usize) {
    let ext = if matches!(shape, Shape::JsonList) {
        "json"
    } else {
        "yaml"
    };
    let path = dir.join(format!("{shape:?}-{bytes}.{ext}"));
    let mut text = Counted(
        std::io::BufWriter::new(std::fs::File::create(&path).unwrap()),
        0,
    );
    let mut n = 0;
    match shape {
        Shape::JsonList => {
            text.push_str("{\n\"apiVersion\": \"v1\",\n\"items\": [\n");
            while text.len() < bytes {
                if n > 0 {
                    text.push_str(",\n");
                }
                text.push_str(&pod_json(n));
                n += 1;
            }
            text.push_str(
                "\n],\n\"kind\": \"List\",\n\"metadata\": {\"resourceVersion\": \"\"}\n}\n",
            );
        }
        Shape::YamlList => {
            text.push_str("apiVersion: v1\nitems:\n");
            while text.len() < bytes {
                text.push_str(&pod_yaml(n, "- ", "  "));
                n += 1;
            }
            text.push_str("kind: List\nmetadata:\n  resourceVersion: \"\"\n");
        }
        Shape::YamlDocs => {
            while text.len() < bytes {
                text.push_str("---\n");
                text.push_str(&pod_yaml(n, "", ""));
                n += 1;
            }
        }
    }
    std::io::Write::flush(&mut text.0).unwrap();
    (path, n)
}

/// A file being written and the bytes written so far.
struct Counted(std::io::BufWriter<std::fs::File>, usize);

impl Counted {
    fn push_str(&mut self, s: &str) {
        std::io::Write::write_all(&mut self.0, s.as_bytes()).unwrap();
        self.1 += s.len();
    }
    fn len(&self) -> usize {
        self.1
    }
}

/// Run `qosd plan --pods FILE -o json` with its output to `out`; the
/// number of pods planned and the peak resident memory in bytes
/// (`wait4`'s `ru_maxrss`). The kernel counts in that peak the memory of
/// this process at the time of the spawn (the child starts in this
/// process's address space), so the tests here keep theirs small: no
/// file or output is held in memory whole.
// The child is reaped by `wait4`, which std does not know of.
#[allow(clippy::zombie_processes)]
fn plan_peak_rss(file: &Path, out: &Path) -> (usize, u64) {
    let stdout = std::fs::File::create(out).unwrap();
    let err_path = out.with_extension("stderr");
    let stderr = std::fs::File::create(&err_path).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(["plan", "--pods", file.to_str().unwrap(), "-o", "json"])
        .args(NODE)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our own child, not yet waited for; both pointers are
    // valid for the call.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert_eq!(code, 0, "qosd plan {}: {err}", file.display());
    // One `uid_derived` per planned pod (a field only pods have).
    let reader = std::io::BufReader::new(std::fs::File::open(out).unwrap());
    let planned = std::io::BufRead::lines(reader)
        .filter(|l| {
            l.as_ref()
                .unwrap()
                .trim_start()
                .starts_with("\"uid_derived\":")
        })
        .count();
    (planned, usage.ru_maxrss as u64 * 1024)
}

/// Plan a generated list of about `bytes` bytes; check that every pod is
/// planned and that the peak RSS above that of a one-pod list of the same
/// shape (the program itself: a debug build alone is ~20 MiB) is at most
/// 16× the file. With `whole`, the peak itself too, and that it is under
/// the DaemonSet's limit.
fn check(shape: Shape, bytes: usize, whole: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (one, _) = generate(tmp.path(), shape, 1);
    let (_, base) = plan_peak_rss(&one, &tmp.path().join("one.json"));
    let (file, pods) = generate(tmp.path(), shape, bytes);
    let size = std::fs::metadata(&file).unwrap().len();
    let (planned, peak) = plan_peak_rss(&file, &tmp.path().join("plan.json"));
    assert_eq!(planned, pods, "{shape:?}: every pod of the file is planned");
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let ratio = peak as f64 / size as f64;
    let growth = peak.saturating_sub(base);
    eprintln!(
        "{shape:?}: {size} bytes, {pods} pods: peak RSS {:.1} MiB ({ratio:.1}x the file); \
         {:.1} MiB above a one-pod list ({:.1}x the file)",
        mib(peak),
        mib(growth),
        growth as f64 / size as f64
    );
    assert!(
        growth <= MAX_RATIO * size,
        "{shape:?}: peak RSS grows by {growth} bytes for a {size}-byte file (at most {MAX_RATIO}x)"
    );
    if whole {
        assert!(
            peak <= MAX_RATIO * size,
            "{shape:?}: peak RSS {peak} bytes is {ratio:.1}x the {size}-byte file (at most {MAX_RATIO}x)"
        );
        assert!(
            peak < DAEMONSET_LIMIT,
            "{shape:?}: peak RSS {peak} bytes is over the DaemonSet's 128Mi limit"
        );
    }
}

#[test]
fn a_5mb_json_pod_list_fits() {
    check(Shape::JsonList, 5_000_000, true);
}

#[test]
fn a_5mb_yaml_list_fits() {
    check(Shape::YamlList, 5_000_000, true);
}

#[test]
fn a_5mb_multi_document_yaml_fits() {
    check(Shape::YamlDocs, 5_000_000, true);
}

#[test]
fn a_1mb_list_fits_in_each_shape() {
    for shape in [Shape::JsonList, Shape::YamlList, Shape::YamlDocs] {
        check(shape, 1_000_000, false);
    }
}

#[test]
fn a_list_over_the_cap_is_refused_by_size() {
    let tmp = tempfile::tempdir().unwrap();
    let big = tmp.path().join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(qosd_model::core::limits::MAX_MANIFEST_BYTES + 1)
        .unwrap();
    let mut args = vec!["plan", "--pods", big.to_str().unwrap()];
    args.extend_from_slice(NODE);
    let out = Command::new(env!("CARGO_BIN_EXE_qosd"))
        .args(&args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("big.json") && err.contains("larger than 16777216 bytes"),
        "{err}"
    );
}
