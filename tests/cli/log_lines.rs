//! Log lines an operator's tools can read: under `logFormat: json` every
//! line is one JSON object with unique keys (no field shadows the line's
//! own `message`), the cgroup v1 warning is one of those lines (once, worded
//! after the kubelet config's `failCgroupV1`), and a state that lasts — the
//! runtime away at start — is logged when it begins, not on every retry.
//!
//! The daemon runs in dry-run over a private, empty cgroupfs directory
//! against a runtime socket that does not exist: no root, no runtime.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{wait_for, Daemon};

/// The top-level keys of one JSON object, in order, duplicates kept (a
/// `serde_json::Map` would keep only the last of a repeated key).
fn top_level_keys(line: &str) -> Result<Vec<String>, String> {
    use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some(k) = m.next_key::<String>()? {
                m.next_value::<IgnoredAny>()?;
                keys.push(k);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_str(line);
    let keys = de.deserialize_map(Keys).map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(keys)
}

/// Every line of `log` is a JSON object whose keys are unique.
fn assert_json_lines_with_unique_keys(log: &str) {
    for line in log.lines() {
        let keys = top_level_keys(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let mut sorted = keys.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), keys.len(), "a repeated key: {line}");
    }
}

#[test]
fn the_duplicate_key_check_sees_a_repeated_key() {
    assert_eq!(
        top_level_keys(r#"{"message":"a","x":{"message":1},"message":"b"}"#).unwrap(),
        ["message", "x", "message"]
    );
    assert!(top_level_keys("qosd: warning: plain text").is_err());
    let named = names_a_message_field();
    assert!(named(
        r#"reason = %v.reason, message = %v.message.trim_end(), "evicting""#
    ));
    assert!(named(r#"pod = %p, %message, "x""#));
    assert!(!named(r#"eviction_message = %v.message, "message = x""#));
    assert!(!named(r#"error = %e.message, "x""#));
}

/// Rust files under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The fields named `message` in tracing macros: under JSON they would
/// repeat the line's own `message` key.
#[test]
fn no_tracing_macro_logs_a_field_named_message() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("crates"), &mut files);
    let field = names_a_message_field();
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (start, _) in text.match_indices('!') {
            let head = &text[..start];
            let name_start = head
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let name = &head[name_start..];
            if !matches!(
                name,
                "trace" | "debug" | "info" | "warn" | "error" | "event"
            ) {
                continue;
            }
            let rest = &text[start + 1..];
            if !rest.starts_with('(') {
                continue;
            }
            // The macro's arguments, to the matching parenthesis.
            let mut depth = 0usize;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let args = &rest[1..end];
            if field(args) {
                let line = text[..start].lines().count();
                found.push(format!(
                    "{}:{line}",
                    f.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "tracing fields named `message` (name them after what they hold): {found:?}"
    );
}

/// Whether macro arguments name a field `message` (`message = …`,
/// `%message`, `?message`), string literals skipped.
fn names_a_message_field() -> impl Fn(&str) -> bool {
    |args: &str| {
        let mut code = String::new();
        let mut in_str = false;
        let mut prev = ' ';
        for c in args.chars() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                code.push(c);
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
        }
        let b = code.as_bytes();
        code.match_indices("message").any(|(i, _)| {
            let before = code[..i].trim_end();
            let after = code[i + "message".len()..].trim_start();
            let ident_before =
                i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b'.');
            let ident_after = code[i + 7..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if ident_after {
                return false;
            }
            let sigil = before.ends_with('%') || before.ends_with('?');
            (sigil && !code[..i].ends_with('.'))
                || (!ident_before && after.starts_with('=') && !after.starts_with("=="))
        })
    }
}

/// `qosd run --dry-run --log-format json` on cgroup v1 with a kubelet
/// config, its runtime socket missing.
fn start(dir: &Path, kubelet: &str) -> Daemon {
    let cg = dir.join("cgroup");
    for c in ["cpu", "cpuacct", "memory", "pids", "cpuset", "hugetlb"] {
        std::fs::create_dir_all(cg.join(c)).unwrap();
    }
    let root = dir.join("kubelet");
    std::fs::create_dir_all(&root).unwrap();
    let sock = dir.join("missing.sock");
    let kc = dir.join("config.yaml");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             containerRuntimeEndpoint: unix://{}\n{kubelet}",
            sock.display()
        ),
    )
    .unwrap();
    let args = [
        "run",
        "--dry-run",
        "--log-format",
        "json",
        "--kubelet-config",
        kc.to_str().unwrap(),
        "--cgroupfs",
        cg.to_str().unwrap(),
        "--cgroup-version",
        "v1",
        "--node-cpu",
        "4",
        "--node-memory",
        "8Gi",
        "--root-dir",
        root.to_str().unwrap(),
    ];
    Daemon::start(&args)
}

/// Waits until the daemon failed to reach its runtime `n` times, returns
/// its log.
fn log_after_failures(d: &mut Daemon, n: f64) -> String {
    wait_for("pod source failures", Duration::from_secs(60), || {
        d.metric(r#"qosd_errors_total{kind="pod_source"}"#)
            .is_some_and(|v| v >= n)
    });
    d.assert_running();
    d.log()
}

fn lines_with<'a>(log: &'a str, text: &str) -> Vec<&'a str> {
    log.lines().filter(|l| l.contains(text)).collect()
}

#[test]
fn an_unreachable_runtime_is_logged_once_in_json_with_unique_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = start(dir.path(), "");
    let log = log_after_failures(&mut d, 3.0);
    // Nothing reconciled yet: no generation time, pod counts unknown.
    let st = d.status();
    assert!(st.get("generated_at_ms").is_none(), "{st}");
    assert_eq!(st["pods_unknown"], true, "{st}");
    d.stop();
    assert_json_lines_with_unique_keys(&log);
    let waiting = lines_with(&log, "pod source not reachable at start");
    assert_eq!(waiting.len(), 1, "logged on change, not per retry:\n{log}");
    assert!(waiting[0].contains(r#""failures":1"#), "{}", waiting[0]);
    // failCgroupV1 unset: the kubelet's default refuses v1.
    let v1 = lines_with(&log, "cgroup v1");
    assert_eq!(v1.len(), 1, "once:\n{log}");
    assert!(v1[0].contains("refuses cgroup v1"), "{}", v1[0]);
    assert!(v1[0].contains(r#""level":"WARN""#), "{}", v1[0]);
}

#[test]
fn fail_cgroup_v1_false_is_the_kubelet_running_on_v1_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = start(dir.path(), "failCgroupV1: false\n");
    let log = log_after_failures(&mut d, 1.0);
    d.stop();
    assert_json_lines_with_unique_keys(&log);
    let v1 = lines_with(&log, "cgroup v1");
    assert_eq!(v1.len(), 1, "once:\n{log}");
    assert!(v1[0].contains("maintenance mode"), "{}", v1[0]);
    assert!(!v1[0].contains("refuses"), "{}", v1[0]);
    assert!(v1[0].contains(r#""fail_cgroup_v1":false"#), "{}", v1[0]);
}
