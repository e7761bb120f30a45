//! Reading manifest documents one at a time, and a list's `items` one at
//! a time: a list of thousands of pods never exists as one tree. Each item
//! is turned into a pod (or its error) as soon as it is read and its tree
//! dropped, so memory follows the pods, not the text.
//!
//! What a manifest does not normally contain (a top level that is neither
//! a mapping nor empty, a repeated or non-string key, a tag, `items` that
//! is not a list, a YAML key that has no JSON form) stops the reading with
//! [`Error::Whole`]: the caller then reads the text as one tree, so results
//! and error messages are those of the whole-tree reading.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::{Item, Obj};

/// Carried in a parser error to mean "read this text whole instead".
const WHOLE: &str = "\u{1}read the document whole\u{1}";

/// One document as read.
pub(super) enum Doc {
    /// Empty, or a mapping without `items`: walked as one tree.
    Whole(Value),
    /// A mapping whose `items` list was converted item by item; `obj` has
    /// every other field.
    Streamed { obj: Obj, items: Vec<Item> },
}

/// Why reading stopped.
pub(super) enum Error {
    /// Not valid JSON or YAML: the message, as the whole-tree reading says it.
    Parse(String),
    /// Something unusual: read the text whole.
    Whole,
}

/// The text's syntax, and what turns one list item into an [`Item`].
#[derive(Clone, Copy)]
struct Reader<'a> {
    json: bool,
    item: &'a dyn Fn(&Value, usize) -> Item,
}

/// Read every document of `text` (one for JSON), handing each to `doc`
/// as soon as it is read.
pub(super) fn read(
    text: &str,
    json: bool,
    item: &dyn Fn(&Value, usize) -> Item,
    doc: &mut dyn FnMut(Doc),
) -> Result<(), Error> {
    let r = Reader { json, item };
    if json {
        let mut de = serde_json::Deserializer::from_str(text);
        let d = r
            .deserialize(&mut de)
            .and_then(|d| de.end().map(|()| d))
            .map_err(|e| classify(e, "JSON"))?;
        doc(d);
        return Ok(());
    }
    if let Some(d) = yaml_list_by_item(text, r) {
        doc(d);
        return Ok(());
    }
    for de in yaml_serde::Deserializer::from_str(text) {
        doc(r.deserialize(de).map_err(|e| classify(e, "YAML"))?);
    }
    Ok(())
}

fn classify(e: impl fmt::Display, syntax: &str) -> Error {
    let msg = e.to_string();
    if msg.contains(WHOLE) {
        Error::Whole
    } else {
        Error::Parse(format!("invalid {syntax}: {msg}"))
    }
}

fn whole<E: de::Error>() -> E {
    E::custom(WHOLE)
}

/// One value as a JSON tree (YAML through its own tree first, for its
/// rules on tags and numbers).
struct ValueSeed(bool);

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0 {
            Value::deserialize(d)
        } else {
            super::yaml_to_json(yaml_serde::Value::deserialize(d)?).map_err(|_| whole())
        }
    }
}

/// A mapping key: a string.
struct KeySeed(bool);

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        if self.0 {
            String::deserialize(d)
        } else {
            match yaml_serde::Value::deserialize(d)? {
                yaml_serde::Value::String(s) => Ok(s),
                _ => Err(whole()),
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Reader<'_> {
    type Value = Doc;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reader<'_> {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(WHOLE)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Whole(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Whole(Value::Null))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut obj = Obj::new();
        let mut items = None;
        while let Some(key) = map.next_key_seed(KeySeed(self.json))? {
            if obj.contains_key(&key) || (key == "items" && items.is_some()) {
                return Err(whole());
            }
            if key == "items" {
                items = Some(map.next_value_seed(Items(self))?);
            } else {
                let v = map.next_value_seed(ValueSeed(self.json))?;
                obj.insert(key, v);
            }
        }
        Ok(match items {
            Some(items) => Doc::Streamed { obj, items },
            None => Doc::Whole(Value::Object(obj)),
        })
    }
}

/// A list's `items`, converted one by one. After an item that is an error
/// whatever the list's kind, the rest are only checked for syntax.
struct Items<'a>(Reader<'a>);

impl<'de> DeserializeSeed<'de> for Items<'_> {
    type Value = Vec<Item>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Item>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Items<'_> {
    type Value = Vec<Item>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(WHOLE)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Item>, A::Error> {
        let mut out = Vec::new();
        let mut failed = false;
        let mut i = 0;
        while let Some(v) = seq.next_element_seed(ValueSeed(self.0.json))? {
            if !failed {
                let item = (self.0.item)(&v, i);
                failed = item.is_error();
                out.push(item);
            }
            i += 1;
        }
        Ok(out)
    }
}

/// A YAML `List` as `kubectl get -o yaml` prints it (one document, the
/// top-level keys at column 0, `items:` then one `- ` entry per item at
/// column 0), read one item's text at a time: the YAML parser keeps every
/// event of the document it reads, which for a whole list is ten times
/// the text. `None` (read the document as a whole) for any other layout
/// and for anything that does not read cleanly this way: an error, a
/// reference to an anchor of another item; the whole reading then gives
/// the result and the exact error.
fn yaml_list_by_item(text: &str, r: Reader) -> Option<Doc> {
    let (rest, items) = split_items(text)?;
    let Ok(Doc::Whole(Value::Object(obj))) =
        r.deserialize(yaml_serde::Deserializer::from_str(&rest))
    else {
        return None;
    };
    if obj.contains_key("items") {
        return None;
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, chunk) in items.iter().enumerate() {
        let Ok(yaml_serde::Value::Sequence(mut seq)) = yaml_serde::from_str(chunk) else {
            return None;
        };
        if seq.len() != 1 {
            return None;
        }
        let v = super::yaml_to_json(seq.pop()?).ok()?;
        let item = (r.item)(&v, i);
        if item.is_error() {
            return None;
        }
        out.push(item);
    }
    Some(Doc::Streamed { obj, items: out })
}

/// Cut a one-document YAML mapping with `items:` at column 0 followed by
/// `- ` entries at column 0 into the text without the items and each
/// item's text. `None` when the layout is any other.
fn split_items(text: &str) -> Option<(String, Vec<&str>)> {
    let col0 = |l: &str| !l.is_empty() && !l.starts_with([' ', '\t', '#']);
    let mut rest = String::new();
    let mut items: Vec<&str> = Vec::new();
    let mut in_items = false;
    let mut seen_items = false;
    let mut start: Option<usize> = None;
    let mut started = false;
    let mut off = 0;
    for line in text.split_inclusive('\n') {
        let l = line.trim_end_matches(['\n', '\r']);
        let at = off;
        off += line.len();
        if l.starts_with("---") || l.starts_with("...") || l.starts_with('%') {
            return None;
        }
        // The top-level mapping starts at column 0.
        if !started && col0_content(l) {
            if !col0(l) {
                return None;
            }
            started = true;
        }
        let entry = l == "-" || l.starts_with("- ");
        if in_items && col0(l) && !entry {
            in_items = false;
            if let Some(s) = start.take() {
                items.push(&text[s..at]);
            }
        }
        if in_items {
            if entry {
                if let Some(s) = start.replace(at) {
                    items.push(&text[s..at]);
                }
            } else if start.is_none() && col0_content(l) {
                return None;
            }
            continue;
        }
        if l == "items:" {
            if seen_items {
                return None;
            }
            seen_items = true;
            in_items = true;
            continue;
        }
        if col0(l) && !simple_key(l) {
            return None;
        }
        rest.push_str(line);
        if !line.ends_with('\n') {
            rest.push('\n');
        }
    }
    if let Some(s) = start {
        items.push(&text[s..]);
    }
    (seen_items && !items.is_empty()).then_some((rest, items))
}

/// A line that starts a plain `key:` entry (`apiVersion: v1`, `metadata:`).
fn simple_key(l: &str) -> bool {
    let key_len = l
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        .count();
    key_len > 0
        && !l.starts_with('-')
        && l[key_len..].starts_with(':')
        && matches!(l.as_bytes().get(key_len + 1), None | Some(b' '))
}

/// A line with content (not blank, not only a comment).
fn col0_content(l: &str) -> bool {
    let t = l.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_lists_are_cut_by_item_and_other_layouts_are_not() {
        let list = "apiVersion: v1\nitems:\n- kind: Pod\n  metadata: {name: a}\n# c\n- kind: Pod\n  metadata:\n    name: b\nkind: List\nmetadata:\n  resourceVersion: \"\"\n";
        let (rest, items) = split_items(list).unwrap();
        assert_eq!(
            rest,
            "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\n"
        );
        assert_eq!(
            items,
            [
                "- kind: Pod\n  metadata: {name: a}\n# c\n",
                "- kind: Pod\n  metadata:\n    name: b\n"
            ]
        );
        for other in [
            "kind: List\nitems:\n  - kind: Pod\n",
            "kind: List\nitems: []\n",
            "---\nkind: List\nitems:\n- kind: Pod\n",
            "  kind: List\nitems:\n- kind: Pod\n",
            "kind: List\nitems:\n- kind: Pod\nitems:\n- kind: Pod\n",
            "{kind: List}\nitems:\n- kind: Pod\n",
            "kind: List\n",
        ] {
            assert!(split_items(other).is_none(), "{other}");
        }
    }
}
