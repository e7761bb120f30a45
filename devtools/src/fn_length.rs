//! Function lengths in the non-test code of the workspace: every `fn` with
//! a body in the module trees of the `qosd` binary (`src/main.rs`) and of
//! the crates (`crates/*/src/lib.rs`), measured in lines from its `fn` line
//! to its closing brace.
//!
//! Test code is left out the way the compiler leaves it out: an item under
//! `#[cfg(test)]` (a `mod tests { … }` block, a helper `fn`), and a whole
//! file when the module it is (`#[cfg(test)] mod fake_tests;` in its
//! parent) is declared under `#[cfg(test)]`, with everything below it.
//! Files are found by following `mod` declarations from the crate roots,
//! so a file no module declares is reported rather than skipped.
//!
//! The reading is lexical: comments, strings and character literals are
//! masked first, so a brace in a format string or a comment never counts.
//!
//! A long function can be justified by a comment starting with
//! `// Long by design:` right above it (above its doc comment and
//! attributes too); [`FnLength::justified`] tells.
//!
//! Shared by `tests/architecture.rs` (the limit) and the `qosd-fn-length`
//! dev tool (the list).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The comment that justifies a long function.
pub const JUSTIFICATION: &str = "// Long by design:";

/// One function with a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnLength {
    /// The file, relative to the workspace root.
    pub path: PathBuf,
    /// The function's name.
    pub name: String,
    /// The line of its `fn` (1-based).
    pub line: usize,
    /// Lines from the `fn` line to the closing brace, both included.
    pub lines: usize,
    /// A [`JUSTIFICATION`] comment stands right above it.
    pub justified: bool,
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every non-test function with a body, by file and line.
    pub functions: Vec<FnLength>,
    /// Rust files under a scanned `src/` that no module declaration
    /// reaches (their code would not be measured).
    pub unreached: Vec<PathBuf>,
}

/// Scan the workspace at `root`: the module trees of `src/main.rs` and of
/// each `crates/*/src/lib.rs` (and `main.rs`).
pub fn scan(root: &Path) -> std::io::Result<Scan> {
    let mut src_dirs = vec![root.join("src")];
    let mut crates: Vec<PathBuf> = fs::read_dir(root.join("crates"))?
        .map(|e| e.map(|e| e.path().join("src")))
        .collect::<Result<_, _>>()?;
    crates.sort();
    src_dirs.extend(crates.into_iter().filter(|d| d.is_dir()));
    let mut out = Scan::default();
    let mut reached = BTreeSet::new();
    for dir in &src_dirs {
        for root_file in ["main.rs", "lib.rs"] {
            let f = dir.join(root_file);
            if f.is_file() {
                walk(root, &f, &mut reached, &mut out)?;
            }
        }
    }
    for dir in &src_dirs {
        let mut files = Vec::new();
        rust_files(dir, &mut files)?;
        for f in files {
            if !reached.contains(&f) {
                out.unreached.push(relative(root, &f));
            }
        }
    }
    Ok(out)
}

/// Measure `file` and every file its non-test `mod` declarations name.
/// Files a test-only declaration names are reached but not measured.
fn walk(
    root: &Path,
    file: &Path,
    reached: &mut BTreeSet<PathBuf>,
    out: &mut Scan,
) -> std::io::Result<()> {
    reached.insert(file.to_path_buf());
    let text = fs::read_to_string(file)?;
    let parsed = parse(&text);
    for f in parsed.functions {
        out.functions.push(FnLength {
            path: relative(root, file),
            ..f
        });
    }
    for m in parsed.modules {
        let Some(child) = module_file(file, &m) else {
            continue;
        };
        if m.test {
            mark_tree(&child, reached)?;
        } else {
            walk(root, &child, reached, out)?;
        }
    }
    Ok(())
}

/// A test-only module file: reached (so not reported), with its own
/// module files, and not measured.
fn mark_tree(file: &Path, reached: &mut BTreeSet<PathBuf>) -> std::io::Result<()> {
    reached.insert(file.to_path_buf());
    let text = fs::read_to_string(file)?;
    for m in parse(&text).modules {
        if let Some(child) = module_file(file, &m) {
            mark_tree(&child, reached)?;
        }
    }
    Ok(())
}

/// The file a `mod` declaration in `parent` names, if it exists: its
/// `#[path]`, else `name.rs` or `name/mod.rs` in the parent's module
/// directory (the parent's own directory for `main.rs`, `lib.rs` and
/// `mod.rs`, else a directory named like the parent file).
fn module_file(parent: &Path, m: &ModDecl) -> Option<PathBuf> {
    let dir = parent.parent()?;
    if let Some(p) = &m.path {
        let f = dir.join(p);
        return f.is_file().then_some(f);
    }
    let stem = parent.file_stem()?.to_str()?;
    let mut base = if matches!(stem, "main" | "lib" | "mod") {
        dir.to_path_buf()
    } else {
        dir.join(stem)
    };
    for inline in &m.inline_parents {
        base.push(inline);
    }
    [
        base.join(format!("{}.rs", m.name)),
        base.join(&m.name).join("mod.rs"),
    ]
    .into_iter()
    .find(|f| f.is_file())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

fn relative(root: &Path, f: &Path) -> PathBuf {
    f.strip_prefix(root).unwrap_or(f).to_path_buf()
}

/// A `mod name;` declaration (a module in its own file).
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModDecl {
    name: String,
    /// Declared under `#[cfg(test)]` (or inside test-only code).
    test: bool,
    /// Its `#[path = "…"]`, if any.
    path: Option<String>,
    /// The inline modules (`mod a { mod b; }`) it is declared in.
    inline_parents: Vec<String>,
}

/// What one file holds.
#[derive(Debug, Default)]
struct Parsed {
    /// Non-test functions with a body (`path` left empty).
    functions: Vec<FnLength>,
    modules: Vec<ModDecl>,
}

/// Read one file's text: its non-test functions and its `mod name;`
/// declarations. A file with `#![cfg(test)]` is all test code.
fn parse(text: &str) -> Parsed {
    let code = mask(text);
    let b = code.as_bytes();
    let mut out = Parsed::default();
    if code.contains("#![cfg(test)]") {
        return out;
    }
    let lines = LineIndex::new(text);
    // The open inline modules, as (name, the brace depth inside them).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
            }
            // A test-only item: skipped whole (its `mod x;` noted).
            b'#' if is_test_attr(&code[i..]) => {
                let end = item_end(b, attr_end(b, i));
                for m in mod_decls(&code, text, i, end) {
                    out.modules.push(ModDecl {
                        test: true,
                        inline_parents: inline.iter().map(|(n, _)| n.clone()).collect(),
                        ..m
                    });
                }
                i = end;
                continue;
            }
            _ if word_at(b, i, "mod") => {
                if let Some((name, after)) = ident_after(b, i + 3) {
                    match next_non_space(b, after) {
                        Some(j) if b[j] == b';' => out.modules.push(ModDecl {
                            name,
                            test: false,
                            path: path_attr_before(&code, text, i),
                            inline_parents: inline.iter().map(|(n, _)| n.clone()).collect(),
                        }),
                        Some(j) if b[j] == b'{' => {
                            inline.push((name, depth + 1));
                        }
                        _ => {}
                    }
                }
            }
            _ if word_at(b, i, "fn") => {
                if let Some(f) = function_at(b, text, &lines, i) {
                    out.functions.push(f);
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The function whose `fn` keyword is at `i`, if it has a name and a body.
fn function_at(b: &[u8], text: &str, lines: &LineIndex, i: usize) -> Option<FnLength> {
    let (name, after) = ident_after(b, i + 2)?;
    let open = body_open(b, after)?;
    let close = matching_close(b, open)?;
    let line = lines.line_of(i);
    Some(FnLength {
        path: PathBuf::new(),
        name,
        line,
        lines: lines.line_of(close) - line + 1,
        justified: justified_above(text, line),
    })
}

/// The `{` of a function body: the first `{` outside parentheses and
/// brackets after the signature's start; `None` at a `;` first (no body).
fn body_open(b: &[u8], from: usize) -> Option<usize> {
    let mut nesting = 0i32;
    for (j, c) in b.iter().enumerate().skip(from) {
        match c {
            b'(' | b'[' => nesting += 1,
            b')' | b']' => nesting -= 1,
            b'{' if nesting == 0 => return Some(j),
            b';' if nesting == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The `}` that closes the `{` at `open`.
fn matching_close(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, c) in b.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// Whether `s` starts with an attribute that makes the next item
/// test-only: `#[cfg(test)]` or `#[cfg(all(test, …))]`.
fn is_test_attr(s: &str) -> bool {
    let compact: String = s.chars().take(40).filter(|c| !c.is_whitespace()).collect();
    compact.starts_with("#[cfg(test)]") || compact.starts_with("#[cfg(all(test,")
}

/// The end of the attribute starting at `i` (just past its `]`).
fn attr_end(b: &[u8], i: usize) -> usize {
    let mut nesting = 0i32;
    for (j, c) in b.iter().enumerate().skip(i + 1) {
        match c {
            b'[' | b'(' => nesting += 1,
            b']' | b')' => {
                nesting -= 1;
                if nesting == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
    }
    b.len()
}

/// The end of the item starting at `from` (after its attribute): past the
/// first `;` outside any bracket, or past the `}` closing its first `{`.
/// More attributes before the item belong to it.
fn item_end(b: &[u8], from: usize) -> usize {
    let mut nesting = 0i32;
    let mut j = from;
    while j < b.len() {
        match b[j] {
            b'#' if nesting == 0 => {
                j = attr_end(b, j);
                continue;
            }
            b'(' | b'[' => nesting += 1,
            b')' | b']' => nesting -= 1,
            b';' if nesting == 0 => return j + 1,
            b'{' if nesting == 0 => {
                return matching_close(b, j).map_or(b.len(), |c| c + 1);
            }
            _ => {}
        }
        j += 1;
    }
    b.len()
}

/// The `mod name;` declarations in `code[from..to]` (a test-only item).
fn mod_decls(code: &str, text: &str, from: usize, to: usize) -> Vec<ModDecl> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    for i in from..to {
        if word_at(b, i, "mod") {
            if let Some((name, after)) = ident_after(b, i + 3) {
                if next_non_space(b, after).is_some_and(|j| b[j] == b';') {
                    out.push(ModDecl {
                        name,
                        test: true,
                        path: path_attr_before(code, text, i),
                        inline_parents: Vec::new(),
                    });
                }
            }
        }
    }
    out
}

/// The value of a `#[path = "…"]` among the attributes right before the
/// `mod` at `i` (read from the unmasked `text`).
fn path_attr_before(code: &str, text: &str, i: usize) -> Option<String> {
    // The attributes and visibility between the previous item and `mod`.
    let start = code[..i].rfind([';', '}', '{']).map_or(0, |p| p + 1);
    let at = code[start..i].find("#[path")? + start;
    let open = text[at..].find('"')? + at + 1;
    let close = text[open..].find('"')? + open;
    Some(text[open..close].to_string())
}

/// Whether the word `w` stands at `i` (not part of a longer identifier).
fn word_at(b: &[u8], i: usize, w: &str) -> bool {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    b[i..].starts_with(w.as_bytes())
        && (i == 0 || !ident(b[i - 1]))
        && b.get(i + w.len()).is_some_and(|c| !ident(*c))
}

/// The identifier after whitespace from `from`, and the index after it
/// (`r#name` included).
fn ident_after(b: &[u8], from: usize) -> Option<(String, usize)> {
    let mut j = next_non_space(b, from)?;
    if b[j..].starts_with(b"r#") {
        j += 2;
    }
    let start = j;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_') {
        j += 1;
    }
    (j > start && !b[start].is_ascii_digit())
        .then(|| (String::from_utf8_lossy(&b[start..j]).into_owned(), j))
}

fn next_non_space(b: &[u8], from: usize) -> Option<usize> {
    (from..b.len()).find(|j| !b[*j].is_ascii_whitespace())
}

/// Whether the comment and attribute lines right above `line` (1-based)
/// hold the [`JUSTIFICATION`].
fn justified_above(text: &str, line: usize) -> bool {
    let above: Vec<&str> = text.lines().take(line - 1).collect();
    above
        .iter()
        .rev()
        .map(|l| l.trim_start())
        .take_while(|l| l.starts_with("//") || l.starts_with("#["))
        .any(|l| l.starts_with(JUSTIFICATION))
}

/// Line numbers of byte offsets.
struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex(starts)
    }

    /// The 1-based line of byte `i`.
    fn line_of(&self, i: usize) -> usize {
        self.0.partition_point(|s| *s <= i)
    }
}

/// `text` with every comment, string literal and character literal
/// replaced by spaces (newlines kept), so braces, `fn` and `mod` are only
/// seen in code. Byte offsets and lines are unchanged.
fn mask(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let end = if rest.starts_with(b"//") {
            rest.iter()
                .position(|c| *c == b'\n')
                .map_or(b.len(), |p| i + p)
        } else if rest.starts_with(b"/*") {
            block_comment_end(b, i)
        } else if let Some(end) = raw_string_end(b, i) {
            end
        } else if b[i] == b'"' || rest.starts_with(b"b\"") {
            let open = if b[i] == b'"' { i } else { i + 1 };
            quoted_end(b, open, b'"')
        } else if b[i] == b'\'' {
            match char_literal_end(b, i) {
                Some(end) => end,
                None => {
                    i += 1; // a lifetime
                    continue;
                }
            }
        } else {
            i += 1;
            continue;
        };
        // Keep the delimiters' positions as spaces too.
        blank(&mut out, i, end);
        i = end;
    }
    // Whole literals and comments are blanked, never part of a character.
    String::from_utf8(out).expect("masking keeps UTF-8")
}

/// Past the `*/` closing the (nestable) block comment at `i`.
fn block_comment_end(b: &[u8], i: usize) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j + 1 < b.len() {
        if b[j..].starts_with(b"/*") {
            depth += 1;
            j += 2;
        } else if b[j..].starts_with(b"*/") {
            depth -= 1;
            j += 2;
            if depth == 0 {
                return j;
            }
        } else {
            j += 1;
        }
    }
    b.len()
}

/// Past a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) starting at `i`.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    if i > 0 && ident(b[i - 1]) {
        return None;
    }
    let mut j = i;
    if b.get(j) == Some(&b'b') {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|c| **c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = j + 1;
    Some(
        b[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(b.len(), |p| body + p + close.len()),
    )
}

/// Past the closing `quote` of the literal opened at `open` (escapes
/// skipped).
fn quoted_end(b: &[u8], open: usize, quote: u8) -> usize {
    let mut j = open + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            c if c == quote => return j + 1,
            _ => j += 1,
        }
    }
    b.len()
}

/// Past a character literal at `i` (`'{'`, `'\n'`, `'\u{7b}'`, `b'x'`'s
/// quote part), or `None` for a lifetime or label (`'a`, `'static`).
fn char_literal_end(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i + 1)? {
        b'\\' => Some(quoted_end(b, i, b'\'')),
        _ => {
            // One character (possibly multi-byte), then the closing quote.
            let len = utf8_len(b[i + 1]);
            (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
        }
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &Parsed) -> Vec<(String, usize, usize)> {
        p.functions
            .iter()
            .map(|f| (f.name.clone(), f.line, f.lines))
            .collect()
    }

    #[test]
    fn measures_from_fn_to_its_closing_brace() {
        let p = parse(
            "/// Doc.\nfn a() {\n    let s = \"}}\";\n    let c = '}';\n    // }\n    /* { */\n}\n\
             pub(crate) async fn b<'a>(x: &'a str) -> Result<(), E>\nwhere\n    E: X,\n{\n    g(|| { 1 });\n}\n\
             trait T {\n    fn decl(&self);\n    fn dflt(&self) {}\n}\n",
        );
        assert_eq!(
            names(&p),
            [
                ("a".to_string(), 2, 6),
                ("b".to_string(), 8, 6),
                ("dflt".to_string(), 16, 1)
            ]
        );
    }

    #[test]
    fn skips_test_items_and_reads_module_declarations() {
        let p = parse(
            "mod a;\npub(crate) mod b;\n#[cfg(test)]\nmod fake_tests;\n\
             #[cfg(test)]\n#[path = \"../x/mod.rs\"]\nmod support;\nfn after() {\n}\n\
             impl S {\n    #[cfg(test)]\n    pub(crate) fn helper(\n        x: u8,\n    ) -> u8 {\n        x\n    }\n    fn kept() {}\n}\n\
             #[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\nfn last() {}\n\
             mod inline {\n    mod nested;\n}\n",
        );
        assert_eq!(
            names(&p),
            [
                ("after".to_string(), 8, 2),
                ("kept".to_string(), 17, 1),
                ("last".to_string(), 24, 1)
            ]
        );
        let mods: Vec<(&str, bool, Option<&str>, Vec<String>)> = p
            .modules
            .iter()
            .map(|m| {
                (
                    m.name.as_str(),
                    m.test,
                    m.path.as_deref(),
                    m.inline_parents.clone(),
                )
            })
            .collect();
        assert_eq!(
            mods,
            [
                ("a", false, None, vec![]),
                ("b", false, None, vec![]),
                ("fake_tests", true, None, vec![]),
                ("support", true, Some("../x/mod.rs"), vec![]),
                ("nested", false, None, vec!["inline".to_string()]),
            ]
        );
        assert!(parse("#![cfg(test)]\nfn f() {}\n").functions.is_empty());
    }

    #[test]
    fn a_justification_comment_counts_above_docs_and_attributes() {
        let p = parse(
            "// Long by design: one arm per field.\n/// Doc.\n#[allow(x)]\nfn a() {}\n\n\
             // Long by design: x\n\nfn b() {}\nfn c() {} // Long by design: no\n",
        );
        let j: Vec<bool> = p.functions.iter().map(|f| f.justified).collect();
        assert_eq!(j, [true, false, false]);
    }

    #[test]
    fn masks_raw_strings_bytes_and_lifetimes() {
        let m = mask("let a = r#\"{\"#; let b = b\"}\"; let c: &'static str = x; 'l: loop {}");
        assert!(!m.contains("r#"));
        assert_eq!(m.matches('{').count(), 1, "{m}");
        assert!(m.contains("'static"), "{m}");
    }
}
