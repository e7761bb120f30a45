//! Text that reaches a terminal or a text log line: names from manifests,
//! the runtime or the API server escaped so they cannot forge a line or
//! drive the terminal.

/// Whether `c` must not reach a terminal or a log line raw: a control
/// character (newline, ESC, ...) or a bidirectional-text override.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with control characters escaped the way Rust's `escape_debug` writes
/// them (`\n`, `\u{1b}`): a name from a manifest or the runtime cannot
/// forge a line or send a terminal escape sequence in text output. Every
/// text rendering of a name, namespace, uid or message goes through this;
/// JSON output escapes by itself.
pub(crate) fn text_safe(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if unsafe_char(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}
