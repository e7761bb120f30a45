//! The one output flag of every command that prints data
//! (`-o text|wide|json|yaml`, like kubectl and crictl) and its renderers.

use serde::Serialize;

/// Standard output could not be written (a closed pipe, a full disk): the
/// command ends with this on stderr and exit code 1, never a panic.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output")]
pub(crate) struct StdoutError(#[source] pub(crate) std::io::Error);

pub(crate) use crate::telemetry::text::text_safe;

/// Text output as written: every control character but the newlines and
/// tabs of the layout escaped (see [`text_safe`]), so no escape sequence
/// reaches the terminal whatever a renderer forgot.
#[cfg(test)]
pub(crate) fn text_output(s: &str) -> String {
    let mut out = Vec::with_capacity(s.len());
    write_text_output(&mut out, s).expect("writing to memory");
    String::from_utf8(out).expect("escaped text is UTF-8")
}

/// [`text_output`] written to `out` piece by piece (no second copy of a
/// large output).
fn write_text_output(out: &mut impl std::io::Write, s: &str) -> std::io::Result<()> {
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.write_all(b"\n")?;
        }
        for (j, part) in line.split('\t').enumerate() {
            if j > 0 {
                out.write_all(b"\t")?;
            }
            out.write_all(text_safe(part).as_bytes())?;
        }
    }
    Ok(())
}

/// Write a command's output to stdout: the one way every command prints.
/// A write or flush error (EPIPE, ENOSPC, ...) is returned as
/// [`StdoutError`].
pub(crate) fn write_stdout(bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    use std::io::Write;
    let bytes = bytes.as_ref();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match std::str::from_utf8(bytes) {
        Ok(text) => write_text_output(&mut out, text),
        Err(_) => out.write_all(bytes),
    }
    .and_then(|()| out.flush())
    .map_err(|e| StdoutError(e).into())
}

/// `-o/--output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Output {
    /// Aligned columns for people.
    #[default]
    Text,
    /// Text with more columns.
    Wide,
    /// The JSON document (a stable contract, see docs/operations.md).
    Json,
    /// The same document as YAML.
    Yaml,
}

impl Output {
    /// `json`/`yaml`: the serialised document; `text`/`wide`: `None`.
    pub(crate) fn structured<T: Serialize>(self, doc: &T) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Output::Json => Some(json(doc)?),
            Output::Yaml => Some(yaml_serde::to_string(doc)?),
            Output::Text | Output::Wide => None,
        })
    }
}

/// Pretty JSON with a final newline.
/// Measured first, then written into a buffer of exactly that size: a
/// plan for thousands of pods is megabytes, and a growing buffer would
/// hold up to twice that.
pub(crate) fn json<T: Serialize>(doc: &T) -> anyhow::Result<String> {
    let mut len = Counter(0);
    serde_json::to_writer_pretty(&mut len, doc)?;
    let mut out = Vec::with_capacity(len.0 + 1);
    serde_json::to_writer_pretty(&mut out, doc)?;
    out.push(b'\n');
    Ok(String::from_utf8(out)?)
}

/// A writer that only counts bytes.
struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Columns padded to their widest cell, two spaces apart; the last column
/// is not padded (free text such as a reason).
pub(crate) fn table<S: AsRef<str>>(head: &[&str], rows: &[Vec<S>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|c| text_safe(c.as_ref()).into_owned())
                .collect()
        })
        .collect();
    let n = head.len();
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 < cells.len() {
                s.push_str(c);
                let pad = w[i].saturating_sub(c.chars().count()) + 2;
                s.extend(std::iter::repeat_n(' ', pad));
            } else {
                s.push_str(c);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(AsRef::as_ref).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["POD", "QOS", "REASON"],
            &[
                vec!["default/a", "BestEffort", "no requests"],
                vec!["b", "Guaranteed", "x"],
            ],
        );
        assert_eq!(
            t,
            "POD        QOS         REASON\ndefault/a  BestEffort  no requests\nb          Guaranteed  x\n"
        );
    }

    #[test]
    fn structured_formats() {
        #[derive(Serialize)]
        struct D {
            a: u32,
        }
        assert_eq!(
            Output::Json.structured(&D { a: 1 }).unwrap().unwrap(),
            "{\n  \"a\": 1\n}\n"
        );
        assert_eq!(
            Output::Yaml.structured(&D { a: 1 }).unwrap().unwrap(),
            "a: 1\n"
        );
        assert!(Output::Wide.structured(&D { a: 1 }).unwrap().is_none());
    }

    #[test]
    fn control_characters_are_escaped_in_text() {
        assert_eq!(text_safe("plain-name"), "plain-name");
        assert_eq!(
            text_safe("a\nb\u{1b}[31m\u{202e}"),
            "a\\nb\\u{1b}[31m\\u{202e}"
        );
        let t = table(&["POD", "QOS"], &[vec!["ns/evil\nFAKE\u{7}", "Burstable"]]);
        assert_eq!(t.lines().count(), 2, "{t:?}");
        assert!(!t.contains('\u{7}'), "{t:?}");
        // Layout newlines and tabs stay; other controls do not.
        assert_eq!(text_output("a\tb\n\u{1b}[0m\n"), "a\tb\n\\u{1b}[0m\n");
    }
}
