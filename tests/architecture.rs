//! The layering rules of docs/design.md ("Crates") that Cargo cannot
//! check by itself (the crate graph it does check: `qosd-model` cannot
//! import `qosd-node`, nothing can import the binary):
//!
//! * `qosd-model` depends, also indirectly, on no async runtime, system-call
//!   or network crate, and its code does no I/O, reads no clock and uses
//!   nothing async outside tests;
//! * inside the binary, nothing outside `src/cli` (and `src/main.rs`)
//!   imports `cli`, and there is no cycle between its top-level modules;
//! * the `qosd` package builds exactly one binary, `qosd` (dev tools live
//!   in the `devtools` workspace member);
//! * no non-test function is over [`MAX_FN_LINES`] lines, except at most
//!   [`MAX_LONG_BY_DESIGN`] that a `// Long by design:` comment justifies
//!   (a table or a match that reads best whole). The scanner is
//!   `devtools/src/fn_length.rs`; `cargo run -p qosd-devtools --bin
//!   qosd-fn-length` lists the long ones.
//!
//! The module graph is read from every path into the crate in each file's
//! non-test code: `crate::<module>` (also in expressions and macro bodies),
//! `$crate::<module>` in `macro_rules!`, grouped `use crate::{a, b::c}`
//! imports, and `super::` chains resolved from the file's place in `src/`
//! (`super::super::cli` in `src/runtime/x.rs` is `crate::cli`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

#[path = "../devtools/src/fn_length.rs"]
mod fn_length;

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

/// The module path of a file under `src/` (`sys/kill.rs` → `[sys, kill]`,
/// `sys/mod.rs` → `[sys]`, `app.rs` → `[app]`, the crate roots → `[]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        match last.as_str() {
            "mod.rs" | "lib.rs" | "main.rs" => {}
            f => parts.push(f.trim_end_matches(".rs").to_string()),
        }
    }
    parts
}

/// The file's code without its unit tests (`#[cfg(test)]` modules and
/// items) and without comments.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if let Some(after) = t.strip_prefix("#[cfg(test)]") {
            // Skip the item: a `mod x { … }` block or a single item, by
            // brace depth; it may start on the attribute's own line
            // (`#[cfg(test)] mod tests;`).
            let mut depth = 0i32;
            let mut opened = false;
            let first = after.trim();
            let rest = (!first.is_empty()).then_some(first);
            for l in rest.into_iter().chain(lines.by_ref()) {
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

/// The names at depth 0 of a `{a, b::{c, d}, e as f}` group; `group` starts
/// just after the opening brace.
fn group_heads(group: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut name = String::new();
    let mut expect_name = true;
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                if !name.is_empty() {
                    heads.push(std::mem::take(&mut name));
                }
                expect_name = true;
            }
            c if depth == 0 && expect_name && (c.is_alphanumeric() || c == '_') => name.push(c),
            _ => {
                if !name.is_empty() {
                    heads.push(std::mem::take(&mut name));
                    expect_name = false;
                }
            }
        }
    }
    if !name.is_empty() {
        heads.push(name);
    }
    heads
}

/// The first path segment(s) after a `prefix::`: one name, or the heads of
/// a `{…}` group.
fn heads_after(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        group_heads(group)
    } else {
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            Vec::new()
        } else {
            vec![name]
        }
    }
}

/// Every top-level module named by a path into the crate in `code`, the
/// code of the file whose module path is `module` (see [`module_path`]):
/// `crate::x`, `$crate::x` and `super::…::x` (the chain resolved from
/// `module`; inside an inline `mod` of the file it resolves one level too
/// high, which can only add an edge, never hide one).
fn crate_refs(code: &str, module: &[String]) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `mycrate::`; `$crate::` is this crate
        }
        refs.extend(heads_after(rest));
    }
    let mut rest = code;
    while let Some(i) = rest.find("super::") {
        let before = rest[..i].chars().last();
        rest = &rest[i..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            rest = &rest["super::".len()..];
            continue; // `mysuper::`, or the tail of a chain already read
        }
        let mut ups = 0;
        while let Some(r) = rest.strip_prefix("super::") {
            ups += 1;
            rest = r;
        }
        let base = &module[..module.len().saturating_sub(ups)];
        match base.first() {
            Some(top) => {
                refs.insert(top.clone());
            }
            None => refs.extend(heads_after(rest)),
        }
    }
    refs
}

/// The `std` modules `code` names: `std::fs` and the heads of grouped
/// imports such as `use std::{fs, io::Read}` (as `std::fs`, `std::io`).
fn std_modules(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("std::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "std::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        out.extend(heads_after(rest).into_iter().map(|h| format!("std::{h}")));
    }
    out
}

struct Source {
    rel: PathBuf,
    module: Option<String>,
    path: Vec<String>,
    code: String,
}

impl Source {
    fn refs(&self) -> BTreeSet<String> {
        crate_refs(&self.code, &self.path)
    }
}

fn sources() -> Vec<Source> {
    sources_in(&src_dir())
}

fn sources_in(root: &Path) -> Vec<Source> {
    let root = root.to_path_buf();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(
        files.len() > 10,
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
                path: module_path(&rel),
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
        for r in s.refs() {
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
    let set =
        |names: &[&str]| -> BTreeSet<String> { names.iter().map(|s| s.to_string()).collect() };
    let here = module_path(Path::new("runtime/daemon.rs"));
    assert_eq!(here, ["runtime", "daemon"]);
    assert_eq!(module_path(Path::new("sys/mod.rs")), ["sys"]);
    assert_eq!(module_path(Path::new("lib.rs")), Vec::<String>::new());

    let code = production_code(
        "use crate::core::qos;\nuse crate::{sys::kill, policy::{enforce, evict}};\n\
         // use crate::cli;\nlet x = crate::telemetry::m(); // crate::kube\n\
         #[cfg(test)]\nmod tests {\n    use crate::runtime::x;\n    fn f() { if true { } }\n}\n\
         #[cfg(test)] mod more;\nuse crate::config;\n",
    );
    assert_eq!(
        crate_refs(&code, &here),
        set(&["core", "sys", "policy", "telemetry", "config"]),
        "code seen: {code}"
    );

    // Paths that do not start with `crate::` or sit in macros count too.
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "runtime/daemon.rs",
            "macro_rules! m { () => { $crate::app::x() } }",
            &["app"],
        ),
        (
            "runtime/daemon.rs",
            "tracing::info!(n = crate::kube::count());",
            &["kube"],
        ),
        (
            "runtime/daemon.rs",
            "let n = crate::cli::status::count(&p);",
            &["cli"],
        ),
        ("runtime/daemon.rs", "use super::super::cli::x;", &["cli"]),
        (
            "runtime/daemon.rs",
            "use super::super::{cli, app::y};",
            &["cli", "app"],
        ),
        (
            "runtime/daemon.rs",
            "use crate::{config, cli};",
            &["config", "cli"],
        ),
        (
            "runtime/daemon.rs",
            "use crate::{\n    config,\n    cli as c,\n};",
            &["config", "cli"],
        ),
        ("runtime/daemon.rs", "use super::eviction::E;", &["runtime"]),
        ("runtime/mod.rs", "pub use super::cli::Args;", &["cli"]),
        (
            "policy/evict/manager.rs",
            "use super::super::super::sys::kill;",
            &["sys"],
        ),
        (
            "runtime/daemon.rs",
            "let x = mycrate::cli::y(); let y = mysuper::cli;",
            &[],
        ),
    ];
    for (file, line, want) in cases {
        let path = module_path(Path::new(file));
        assert_eq!(
            crate_refs(&production_code(line), &path),
            set(want),
            "{file}: {line}"
        );
    }
    assert_eq!(
        std_modules("use std::{fs, io::Read};\nlet t = std::time::Instant::now();"),
        set(&["std::fs", "std::io", "std::time"])
    );

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
fn no_alias_or_remapped_module_hides_an_import() {
    // The graph is read from paths into the crate; an alias of the crate
    // (`use crate as q;`, `extern crate self as qosd;`), a `#[path]` module
    // or an `include!`d file would make imports it cannot see.
    let offenders: Vec<String> = sources()
        .iter()
        .flat_map(|s| {
            ["extern crate", "crate as ", "#[path", "include!("]
                .into_iter()
                .filter(|f| s.code.contains(f))
                .map(|f| format!("{}: {f}", s.rel.display()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(offenders.is_empty(), "{offenders:?}");
}

#[test]
fn nothing_outside_cli_imports_cli() {
    let offenders: Vec<_> = sources()
        .iter()
        .filter(|s| s.module.as_deref() != Some("cli"))
        .filter(|s| s.refs().contains("cli"))
        .map(|s| s.rel.display().to_string())
        .collect();
    assert!(offenders.is_empty(), "`crate::cli` used in {offenders:?}");
}

#[test]
fn the_model_crate_does_no_io() {
    // I/O, clocks, logging, async and the CLI parser belong in the node
    // adapters and the binary; pure logic gets their results as values and
    // returns its findings as values.
    let forbidden_std = [
        "std::fs",
        "std::io",
        "std::net",
        "std::process",
        "std::os",
        "std::thread",
        "std::env",
    ];
    let forbidden = [
        "tokio",
        "async fn",
        ".await",
        "Instant::now",
        "SystemTime::now",
        ".elapsed()",
        "tracing::",
        "clap::",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/model/src");
    let mut problems = Vec::new();
    for s in sources_in(&root) {
        for f in forbidden {
            if s.code.contains(f) {
                problems.push(format!("{} uses {f}", s.rel.display()));
            }
        }
        for f in std_modules(&s.code) {
            if forbidden_std.contains(&f.as_str()) {
                problems.push(format!("{} uses {f}", s.rel.display()));
            }
        }
    }
    assert!(problems.is_empty(), "qosd-model: {problems:#?}");
}

/// The crates `qosd-model` pulls in, directly or not (normal dependencies,
/// from `cargo tree`), hold no async runtime, system-call or network crate.
#[test]
fn the_model_crate_depends_on_no_io_crate() {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "-p",
            "qosd-model",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    assert!(names.contains("serde"), "closure not read: {names:?}");
    for bad in [
        "tokio", "nix", "libc", "tonic", "hyper", "zbus", "rustls", "mio", "socket2",
    ] {
        assert!(
            !names.contains(bad),
            "qosd-model depends on {bad}: {names:?}"
        );
    }
}

#[test]
fn no_cycle_between_top_level_modules() {
    let g = graph(&sources());
    // The graph must be the real one: the composition root uses the layers.
    assert!(
        g.get("app")
            .is_some_and(|d| d.contains("runtime") && d.contains("telemetry")),
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

/// The longest a non-test function may be, in lines (its `fn` line to its
/// closing brace).
const MAX_FN_LINES: usize = 100;

/// How many longer functions may stand, each with a `// Long by design:`
/// comment right above it saying why.
const MAX_LONG_BY_DESIGN: usize = 3;

/// Long functions allowed for now by (file, function), while their file is
/// reworked; each entry goes once its function is split (the test fails
/// while an entry is no longer needed). Empty: every function is split.
const LONG_FOR_NOW: &[(&str, &str)] = &[];

#[test]
fn no_function_is_over_the_line_limit_without_a_reason() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scan = fn_length::scan(root).expect("scan the workspace");
    // The scan must be the real one: the daemon's loop is non-test code.
    assert!(
        scan.functions
            .iter()
            .any(|f| f.name == "run_loop" && f.path == Path::new("src/runtime/daemon.rs")),
        "workspace not scanned: {} functions",
        scan.functions.len()
    );
    assert!(
        scan.unreached.is_empty(),
        "files no module declares (not measured): {:?}",
        scan.unreached
    );
    let long: Vec<&fn_length::FnLength> = scan
        .functions
        .iter()
        .filter(|f| f.lines > MAX_FN_LINES)
        .collect();
    let allowed = |f: &fn_length::FnLength| {
        LONG_FOR_NOW
            .iter()
            .any(|(path, name)| f.path == Path::new(path) && f.name == *name)
    };
    let show = |fs: &[&fn_length::FnLength]| {
        fs.iter()
            .map(|f| {
                format!(
                    "{}:{} {} ({} lines)",
                    f.path.display(),
                    f.line,
                    f.name,
                    f.lines
                )
            })
            .collect::<Vec<_>>()
    };
    let unjustified: Vec<&fn_length::FnLength> = long
        .iter()
        .copied()
        .filter(|f| !f.justified && !allowed(f))
        .collect();
    assert!(
        unjustified.is_empty(),
        "functions over {MAX_FN_LINES} lines: split them, or say why one reads best whole \
         with a `{}` comment right above it: {:#?}",
        fn_length::JUSTIFICATION,
        show(&unjustified)
    );
    let by_design: Vec<&fn_length::FnLength> =
        long.iter().copied().filter(|f| f.justified).collect();
    assert!(
        by_design.len() <= MAX_LONG_BY_DESIGN,
        "at most {MAX_LONG_BY_DESIGN} functions may be long by design: {:#?}",
        show(&by_design)
    );
    let stale: Vec<&(&str, &str)> = LONG_FOR_NOW
        .iter()
        .filter(|(path, name)| {
            !long
                .iter()
                .any(|f| f.path == Path::new(path) && f.name == *name)
        })
        .collect();
    assert!(
        stale.is_empty(),
        "no longer over {MAX_FN_LINES} lines: remove from LONG_FOR_NOW: {stale:?}"
    );
}
