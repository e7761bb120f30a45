//! The documents for users: BENCHMARKS.md short with one current table
//! beside its peers and result files that exist, CHANGELOG by release,
//! no talk of work sessions or branches, README without a repeated
//! sentence and with fixtures that exist, one entry per config key.

use std::collections::BTreeMap;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Text inside backticks.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn benchmarks_is_short_with_one_table_beside_its_peers() {
    let text = read("BENCHMARKS.md");
    let lines = text.lines().count();
    assert!(
        lines <= 400,
        "BENCHMARKS.md has {lines} lines (at most 400)"
    );
    for heading in ["## Machine", "## Results", "## Method", "## Reproduce"] {
        assert!(
            text.lines().any(|l| l == heading),
            "BENCHMARKS.md has no {heading:?}"
        );
    }
    let results = text.split("## Results").nth(1).unwrap();
    let header = results
        .lines()
        .find(|l| l.starts_with("| figure"))
        .expect("the results table");
    for peer in [
        "qosd",
        "earlyoom",
        "systemd-oomd",
        "kernel OOM killer",
        "kubelet-style",
    ] {
        assert!(header.contains(peer), "no {peer} column in {header:?}");
    }
    let tables = text
        .lines()
        .filter(|l| l.starts_with("|---") || l.starts_with("| ---"))
        .count();
    assert_eq!(
        tables, 2,
        "BENCHMARKS.md: the machine table and one results table"
    );
}

#[test]
fn benchmark_result_files_named_exist() {
    let text = read("BENCHMARKS.md");
    let mut named = 0;
    for span in code_spans(&text) {
        for name in span.split([',', ' ']) {
            // Result files (`idle-….json`) and result directories (`rss-…/`).
            let file = (name.ends_with(".json") || name.ends_with(".jsonl")) && !name.contains('/');
            let dir = name.starts_with("rss-") && name.ends_with('/');
            if !(file || dir) || name.contains(['<', '>']) {
                continue;
            }
            named += 1;
            if let Some(glob) = name.split_once('*') {
                let (prefix, suffix) = glob;
                let found = std::fs::read_dir(root().join("bench/results"))
                    .unwrap()
                    .filter_map(|e| e.ok())
                    .any(|e| {
                        let n = e.file_name().to_string_lossy().to_string();
                        n.starts_with(prefix) && n.ends_with(suffix)
                    });
                assert!(
                    found,
                    "BENCHMARKS.md names {name}: no such file in bench/results"
                );
            } else {
                let p = root().join("bench/results").join(name);
                assert!(
                    p.exists(),
                    "BENCHMARKS.md names {name}: {} does not exist",
                    p.display()
                );
            }
        }
    }
    assert!(named > 10, "only {named} result files named");
}

#[test]
fn changelog_is_by_release() {
    let text = read("CHANGELOG.md");
    let versions: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(versions.first(), Some(&"## [Unreleased]"), "{versions:?}");
    assert!(
        versions.contains(&"## [0.1.0] - 2026-11-27"),
        "no 0.1.0 release: {versions:?}"
    );
    for v in &versions[1..] {
        let (ver, date) = v
            .trim_start_matches("## [")
            .split_once("] - ")
            .unwrap_or_else(|| panic!("not a release heading: {v:?}"));
        assert!(
            ver.split('.').count() == 3 && ver.split('.').all(|n| n.parse::<u32>().is_ok()),
            "not a version: {v:?}"
        );
        assert!(
            date.len() == 10 && date.as_bytes()[4] == b'-',
            "not a date: {v:?}"
        );
    }
    for l in text.lines().filter(|l| l.starts_with("### ")) {
        assert!(
            [
                "Added",
                "Changed",
                "Deprecated",
                "Removed",
                "Fixed",
                "Security"
            ]
            .iter()
            .any(|k| *l == format!("### {k}")),
            "not a Keep a Changelog section: {l:?}"
        );
    }
}

/// The user documents, the bench scripts and the shipped files.
fn product_texts() -> Vec<String> {
    let mut files: Vec<String> = ["README.md", "CHANGELOG.md", "BENCHMARKS.md"]
        .map(String::from)
        .into();
    for dir in [
        "docs",
        "bench",
        "bench/evict",
        "bench/results",
        "config",
        "deploy",
        "deploy/monitoring",
        "fuzz",
    ] {
        for e in std::fs::read_dir(root().join(dir))
            .unwrap()
            .filter_map(|e| e.ok())
        {
            let name = e.file_name().to_string_lossy().to_string();
            let text_file = [".md", ".sh", ".py", ".c", ".yaml", ".json"]
                .iter()
                .any(|ext| name.ends_with(ext));
            if text_file && e.path().is_file() {
                files.push(format!("{dir}/{name}"));
            }
        }
    }
    files
}

#[test]
fn no_talk_of_sessions_or_branches() {
    let banned = [
        "session",
        "wave 1",
        "wave 2",
        "wave 3",
        "this branch",
        concat!("branch", " `"),
        "work period",
    ];
    let mut hits = Vec::new();
    let files = product_texts();
    assert!(files.len() > 20, "{files:?}");
    for f in &files {
        for (n, line) in read(f).lines().enumerate() {
            let lower = line.to_lowercase();
            if let Some(b) = banned.iter().find(|b| lower.contains(*b)) {
                hits.push(format!("{f}:{}: {b:?}: {line}", n + 1));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "words about work sessions or branches:\n{}",
        hits.join("\n")
    );
}

#[test]
fn readme_repeats_no_sentence_and_its_fixtures_exist() {
    let text = read("README.md");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut seen = BTreeMap::new();
    for sentence in flat.split(". ").map(str::trim).filter(|s| s.len() >= 40) {
        *seen.entry(sentence).or_insert(0) += 1;
    }
    let repeated: Vec<_> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(s, _)| s)
        .collect();
    assert!(repeated.is_empty(), "README.md repeats: {repeated:#?}");
    let mut fixtures = 0;
    for word in text.split_whitespace() {
        if let Some(path) = word.strip_prefix("fixtures/") {
            let path = path.trim_end_matches(['`', ')', ',', '.']);
            fixtures += 1;
            assert!(
                root().join("fixtures").join(path).exists(),
                "README.md names fixtures/{path}, which does not exist"
            );
        }
    }
    assert!(fixtures >= 2, "README.md names {fixtures} fixtures");
    assert!(
        text.contains("--usage fixtures/"),
        "README's eviction-order example names a usage file that exists"
    );
}

/// The configuration reference has one row per declared setting
/// (`qosd_config::settings::SETTINGS`), and no other row; a row shows the
/// declared default.
#[test]
fn config_reference_has_one_entry_per_key() {
    use qosd_config::settings::{Kind, SETTINGS};
    let doc = read("docs/operations.md");
    let start = doc.find("## Configuration reference").expect("the section");
    let section = &doc[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut rows: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let key = line.split('`').nth(1).unwrap();
        rows.entry(key).or_default().push(line);
    }
    let twice: Vec<_> = rows.iter().filter(|(_, r)| r.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "config keys listed more than once: {twice:?}"
    );
    let declared: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
    let undeclared: Vec<_> = rows.keys().filter(|k| !declared.contains(k)).collect();
    assert!(
        undeclared.is_empty(),
        "rows of undeclared settings: {undeclared:?}"
    );
    let missing: Vec<_> = declared.iter().filter(|k| !rows.contains_key(*k)).collect();
    assert!(missing.is_empty(), "settings without a row: {missing:?}");
    for s in SETTINGS {
        if s.default.is_empty() || matches!(s.kind, Kind::Map | Kind::ThresholdMap) {
            continue;
        }
        let row = rows[s.key][0];
        let default = row.split(" | ").nth(2).unwrap_or_default();
        let shown = match s.kind {
            Kind::List => format!("`[{}]`", s.default.replace(',', ", ")),
            _ => format!("`{}`", s.default),
        };
        assert!(
            default.contains(&shown),
            "{}: the default column {default:?} does not show {shown}",
            s.key
        );
    }
}
