//! The one output flag of every command that prints data
//! (`-o text|wide|json|yaml`, like kubectl and crictl) and its renderers.

use serde::Serialize;

/// Standard output could not be written (a closed pipe, a full disk): the
/// command ends with this on stderr and exit code 1, never a panic.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to standard output")]
pub(crate) struct StdoutError(#[source] pub(crate) std::io::Error);

/// Write a command's output to stdout: the one way every command prints.
/// A write or flush error (EPIPE, ENOSPC, ...) is returned as
/// [`StdoutError`].
pub(crate) fn write_stdout(bytes: impl AsRef<[u8]>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(bytes.as_ref())
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
pub(crate) fn json<T: Serialize>(doc: &T) -> anyhow::Result<String> {
    let mut s = serde_json::to_string_pretty(doc)?;
    s.push('\n');
    Ok(s)
}

/// Columns padded to their widest cell, two spaces apart; the last column
/// is not padded (free text such as a reason).
pub(crate) fn table<S: AsRef<str>>(head: &[&str], rows: &[Vec<S>]) -> String {
    let n = head.len();
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.as_ref().chars().count());
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
}
