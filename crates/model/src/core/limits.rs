//! Limits on untrusted text before it reaches a parser: the size of a file
//! and the nesting depth of a YAML or JSON document.
//!
//! A YAML parser walks nested collections recursively and some of its work
//! grows faster than the text, so a few hundred kilobytes of `[[[[…` or of
//! ever deeper indentation take seconds to minutes. A real configuration or
//! pod manifest nests about a dozen levels; [`check_nesting`] scans the
//! text once, in linear time, and refuses anything deeper than
//! [`MAX_NESTING`] before any parser sees it.

/// Largest configuration, manifest or kubelet config file read, in bytes.
pub const MAX_INPUT_BYTES: u64 = 4 << 20;

/// Largest pod manifest or pod list file read, in bytes: a list of a few
/// thousand pods (`kubectl get pods -A -o yaml`) fits. Lists are parsed
/// one item at a time, so memory stays a small multiple of this.
pub const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// Deepest nesting accepted in a YAML or JSON document (a pod manifest
/// nests ~12 levels).
pub const MAX_NESTING: usize = 64;

/// Refuse text that nests deeper than `max` levels, counting flow
/// collections (`[`, `{`) outside quoted strings and comments and block
/// levels (a new, deeper indentation or a `- ` entry on a line). The count
/// is an upper bound of the real depth, linear in the text.
pub fn check_nesting(text: &str, max: usize) -> Result<(), String> {
    let too_deep = |line: usize| {
        Err(format!(
            "line {line}: nested more than {max} levels deep (refused before parsing)"
        ))
    };
    let mut indents: Vec<usize> = Vec::new();
    let mut flow = 0usize;
    // Quote state carries across lines (multi-line flow scalars).
    let mut quote: Option<u8> = None;
    for (n, line) in text.lines().enumerate() {
        let b = line.as_bytes();
        let mut i = 0;
        if quote.is_none() && flow == 0 {
            let indent = b.iter().take_while(|c| **c == b' ' || **c == b'\t').count();
            let rest = &b[indent..];
            if !rest.is_empty() && rest[0] != b'#' {
                while indents.last().is_some_and(|&top| top >= indent) {
                    indents.pop();
                }
                indents.push(indent);
                // `- - - x`: each dash opens a level of its own.
                let mut dashes = 0;
                let mut j = 0;
                while j + 1 < rest.len() && rest[j] == b'-' && rest[j + 1] == b' ' {
                    dashes += 1;
                    j += 2;
                    while j < rest.len() && rest[j] == b' ' {
                        j += 1;
                    }
                }
                if indents.len() + dashes > max {
                    return too_deep(n + 1);
                }
            }
            i = indent;
        }
        while i < b.len() {
            let c = b[i];
            match quote {
                Some(b'"') if c == b'\\' => i += 1,
                Some(q) if c == q => {
                    // '' inside a single-quoted scalar is an escaped quote.
                    if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                        i += 1;
                    } else {
                        quote = None;
                    }
                }
                Some(_) => {}
                None => match c {
                    // A quote opens a scalar only where a scalar starts:
                    // `it's` in a plain scalar is text.
                    b'"' | b'\'' if scalar_start(&b[..i]) => quote = Some(c),
                    b'#' if i == 0 || matches!(b[i - 1], b' ' | b'\t') => break,
                    b'[' | b'{' => {
                        flow += 1;
                        if indents.len() + flow > max {
                            return too_deep(n + 1);
                        }
                    }
                    b']' | b'}' => flow = flow.saturating_sub(1),
                    _ => {}
                },
            }
            i += 1;
        }
    }
    Ok(())
}

/// Whether a scalar may start after `before` (the line so far).
fn scalar_start(before: &[u8]) -> bool {
    match before.iter().rev().find(|c| !matches!(**c, b' ' | b'\t')) {
        None => true,
        Some(c) => matches!(c, b':' | b'-' | b'[' | b'{' | b',' | b'?'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_documents_pass() {
        let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a # [[[[\n  annotations: {x: '[[[', y: \"{{\\\"\"}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits: {cpu: 1, memory: [1, 2]}\n";
        assert!(check_nesting(pod, 8).is_ok());
        assert!(check_nesting("{\"a\": [[1], {\"b\": \"]]]]\"}]}", 4).is_ok());
        assert!(check_nesting("", 1).is_ok());
    }

    #[test]
    fn deep_documents_are_refused() {
        let flow = "[".repeat(100_000);
        let e = check_nesting(&flow, MAX_NESTING).unwrap_err();
        assert!(e.contains("line 1") && e.contains("64 levels"), "{e}");
        let mut block = String::new();
        for d in 0..70 {
            block.push_str(&" ".repeat(d));
            block.push_str("a:\n");
        }
        assert!(check_nesting(&block, MAX_NESTING).is_err());
        assert!(check_nesting(&block, 70).is_ok());
        let dashes = format!("{}x\n", "- ".repeat(70));
        assert!(check_nesting(&dashes, MAX_NESTING).is_err());
    }

    #[test]
    fn quotes_and_comments_do_not_count() {
        let s = format!(
            "a: '{}'\nb: \"{}\"\n# {}\n",
            "[".repeat(99),
            "{".repeat(99),
            "[".repeat(99)
        );
        assert!(check_nesting(&s, 3).is_ok());
        // An apostrophe inside a plain scalar opens no quote.
        assert!(check_nesting("a: it's\nb: [[[[x]]]]\n", 3).is_err());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,64}") {
            let _ = check_nesting(&s, 4);
        }
    }
}
