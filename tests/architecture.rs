//! The layering rules of docs/design.md ("Module layout"), checked on the
//! source text so that a change that breaks them fails the test run:
//!
//! * nothing outside `src/cli` (and the binary's `src/main.rs`) imports `cli`;
//! * `core` imports only itself, `policy` only `core` and itself, and
//!   neither does I/O, reads a clock or uses anything async outside tests;
//! * there is no cycle between the top-level modules of `src/`;
//! * the `qosd` package builds exactly one binary, `qosd` (dev tools live
//!   in the `devtools` workspace member).
//!
//! The module graph is read from `crate::<module>` paths (including grouped
//! `use crate::{a, b::c}` imports) in each file's non-test code.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file under `src/` belongs to (`src/sys/kill.rs` →
/// `sys`, `src/app.rs` → `app`); `None` for the crate roots.
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    match first.as_str() {
        "lib.rs" | "main.rs" => None,
        f => Some(f.trim_end_matches(".rs").to_string()),
    }
}

/// The file's code without its unit tests (`#[cfg(test)]` modules and
/// items) and without comments.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            // Skip the next item: a `mod x { … }` block or a single item,
            // by brace depth.
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                for c in l.chars() {
                    match c {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match line.find("//") {
            // Keep `://` in string literals (URLs); a trailing comment is cut.
            Some(i) if !line[..i].ends_with(':') && !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every top-level module named by a `crate::` path in `code`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // e.g. `$crate::` or `mycrate::`
        }
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a, b::{c, d}, e}`: the names at depth 0 of the group.
            let mut depth = 0;
            let mut name = String::new();
            let mut expect_name = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => expect_name = true,
                    c if depth == 0 && expect_name && (c.is_alphanumeric() || c == '_') => {
                        name.push(c)
                    }
                    _ => {
                        if !name.is_empty() {
                            refs.insert(std::mem::take(&mut name));
                            expect_name = false;
                        }
                    }
                }
            }
            if !name.is_empty() {
                refs.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs
}

struct Source {
    rel: PathBuf,
    module: Option<String>,
    code: String,
}

fn sources() -> Vec<Source> {
    let root = src_dir();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(
        files.len() > 20,
        "expected the qosd sources under {}",
        root.display()
    );
    files
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(&root).expect("under src").to_path_buf();
            let text = fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            Source {
                module: top_module(&rel),
                code: production_code(&text),
                rel,
            }
        })
        .collect()
}

fn graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<String> = sources.iter().filter_map(|s| s.module.clone()).collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let Some(m) = &s.module else { continue };
        let entry = g.entry(m.clone()).or_default();
        for r in crate_refs(&s.code) {
            if r != *m && modules.contains(&r) {
                entry.insert(r);
            }
        }
    }
    g
}

/// A cycle in `g`, if any, as the list of modules along it.
fn find_cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let start = stack.iter().position(|x| x == m).expect("on stack");
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, g, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn the_parser_reads_paths_groups_and_skips_tests_and_comments() {
    let code = production_code(
        "use crate::core::qos;\nuse crate::{sys::kill, policy::{enforce, evict}};\n\
         // use crate::cli;\nlet x = crate::telemetry::m(); // crate::kube\n\
         macro_rules! m { () => { $crate::app::x() } }\n\
         #[cfg(test)]\nmod tests {\n    use crate::runtime::x;\n    fn f() { if true { } }\n}\n\
         use crate::config;\n",
    );
    let refs = crate_refs(&code);
    let want: BTreeSet<String> = ["core", "sys", "policy", "telemetry", "config"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(refs, want, "code seen: {code}");

    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    g.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&g), None);
}

#[test]
fn nothing_outside_cli_imports_cli() {
    let offenders: Vec<_> = sources()
        .iter()
        .filter(|s| s.module.as_deref() != Some("cli"))
        .filter(|s| crate_refs(&s.code).contains("cli"))
        .map(|s| s.rel.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "`crate::cli` used in {offenders:?}");
}

#[test]
fn core_and_policy_depend_only_downwards_and_do_no_io() {
    let allowed: BTreeMap<&str, &[&str]> =
        BTreeMap::from([("core", &[][..]), ("policy", &["core"][..])]);
    // I/O, clocks and async belong in sys/, cri/, kube/, runtime/ and the
    // composition root; pure logic gets their results as values.
    let forbidden = [
        "std::fs",
        "std::net",
        "std::process",
        "std::os::",
        "tokio",
        "Instant::now",
        "SystemTime::now",
        "std::env::var",
    ];
    let mut problems = Vec::new();
    for s in sources() {
        let Some(m) = s.module.as_deref() else {
            continue;
        };
        let Some(ok) = allowed.get(m) else { continue };
        for r in crate_refs(&s.code) {
            if r != m && !ok.contains(&r.as_str()) {
                problems.push(format!("{} imports crate::{r}", s.rel.display()));
            }
        }
        for f in forbidden {
            if s.code.contains(f) {
                problems.push(format!("{} uses {f}", s.rel.display()));
            }
        }
    }
    assert!(problems.is_empty(), "layering: {problems:#?}");
}

#[test]
fn no_cycle_between_top_level_modules() {
    let g = graph(&sources());
    // The graph must be the real one: the composition root uses the layers.
    assert!(
        g.get("app")
            .is_some_and(|d| d.contains("runtime") && d.contains("config")),
        "module graph not read: {g:#?}"
    );
    assert_eq!(find_cycle(&g), None, "module graph: {g:#?}");
}

#[test]
fn the_qosd_package_ships_one_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        !root.join("src/bin").exists(),
        "src/bin would add binaries to the qosd package; dev tools go in devtools/"
    );
    let manifest = fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let mut bins = Vec::new();
    let mut in_bin = false;
    for line in manifest.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            in_bin = t == "[[bin]]";
        } else if in_bin {
            if let Some(v) = t.strip_prefix("name") {
                bins.push(
                    v.trim_start_matches([' ', '='])
                        .trim()
                        .trim_matches('"')
                        .to_string(),
                );
            }
        }
    }
    assert_eq!(
        bins,
        vec!["qosd".to_string()],
        "[[bin]] targets of the qosd package"
    );
    assert!(
        manifest.contains("members") && manifest.contains("\"devtools\""),
        "dev tools are a workspace member"
    );
}
