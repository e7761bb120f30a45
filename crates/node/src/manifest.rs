//! Pod manifests (YAML/JSON, Pod / List / multi-document, directories) → [`Pod`]s.
//!
//! Documents are parsed into a generic tree, one document and one list
//! item at a time (a list of thousands of pods is never one tree: memory
//! stays a small multiple of the file, see `stream`), and walked by hand
//! so every error names the file and the field path
//! (`spec.containers[0].resources.limits.cpu: invalid quantity "1.2.3": ...`).
//! Like the API server: unknown fields are ignored, wrong types are errors,
//! a missing request is defaulted to the limit, negative quantities and
//! requests above limits are rejected. Workloads (Deployment, StatefulSet,
//! DaemonSet, ReplicaSet, Job, CronJob) give the pod of their template;
//! documents of other kinds (Service, ConfigMap, ...) are skipped; empty
//! documents too.
//!
//! A Pod with a `status` (`kubectl get pod -o json`) gets the resources the
//! kubelet admitted, not the spec's, while an in-place resize is not
//! applied (see [`crate::admitted`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use qosd_model::core::model::{Container, Pod, PodOrigin, ResourceList, ResourceRequirements};
use qosd_model::core::quantity::Quantity;
use qosd_model::policy::enforce::versions::KubeletVersion;

mod stream;

/// A manifest that cannot be read or parsed: the file (or source name)
/// and what is wrong, with the field path.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ManifestError {
    pub(crate) file: PathBuf,
    pub(crate) message: String,
}

/// Load every pod from the given files and directories (directories:
/// `*.yaml`, `*.yml`, `*.json`, recursively, in name order). Only regular
/// files up to [`crate::sys::input::MAX_MANIFEST_BYTES`] are read; a file
/// reached twice (named twice, symlinks, loops) counts once; two pods with
/// the same uid are refused, naming both sources.
pub fn load_paths(paths: &[PathBuf]) -> Result<Vec<Pod>, ManifestError> {
    load_paths_for(paths, KubeletVersion::NEWEST)
}

/// [`load_paths`] with `version`'s rules for what the kubelet admitted.
pub fn load_paths_for(
    paths: &[PathBuf],
    version: KubeletVersion,
) -> Result<Vec<Pod>, ManifestError> {
    let mut pods = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let walk_err = |p: &Path, e: crate::sys::input::InputError| ManifestError {
        file: p.to_path_buf(),
        message: match e {
            crate::sys::input::InputError::Io { source, .. } => format!("cannot read: {source}"),
            other => other.into_io().to_string(),
        },
    };
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| ManifestError {
            file: p.clone(),
            message: format!("cannot read: {e}"),
        })?;
        if meta.is_dir() {
            let files = crate::sys::input::walk_files(p, &is_manifest_name, &mut seen)
                .map_err(|e| walk_err(p, e))?;
            for f in files {
                pods.extend(load_file(&f, version)?);
            }
        } else if crate::sys::input::first_visit(p, &mut seen) {
            pods.extend(load_file(p, version)?);
        }
    }
    check_unique_uids(&pods)?;
    Ok(pods)
}

fn is_manifest_name(p: &Path) -> bool {
    matches!(
        p.extension().and_then(|x| x.to_str()),
        Some("yaml" | "yml" | "json")
    )
}

/// Two pods with one uid would share one cgroup: refuse, naming both.
fn check_unique_uids(pods: &[Pod]) -> Result<(), ManifestError> {
    let mut first: BTreeMap<&str, &Pod> = BTreeMap::new();
    for p in pods {
        if let Some(prev) = first.insert(&p.uid, p) {
            let origin = |p: &Pod| match &p.origin {
                PodOrigin::Manifest(s) => s.clone(),
                other => format!("{other:?}"),
            };
            return Err(ManifestError {
                file: PathBuf::from(origin(p)),
                message: format!(
                    "pod {} has uid {:?}, which pod {} in {} already has: pod uids must be unique",
                    p.key(),
                    p.uid,
                    prev.key(),
                    origin(prev)
                ),
            });
        }
    }
    Ok(())
}

/// Load one file (a regular file of at most
/// [`crate::sys::input::MAX_MANIFEST_BYTES`]).
pub(crate) fn load_file(path: &Path, version: KubeletVersion) -> Result<Vec<Pod>, ManifestError> {
    use crate::sys::input::{read_text_with, Symlinks, MAX_MANIFEST_BYTES};
    let text =
        read_text_with(path, MAX_MANIFEST_BYTES, Symlinks::Follow).map_err(|e| ManifestError {
            file: path.to_path_buf(),
            message: match e {
                crate::sys::input::InputError::Io { source, .. } => {
                    format!("cannot read: {source}")
                }
                other => other.into_io().to_string(),
            },
        })?;
    parse_str_for(&text, &path.display().to_string(), version)
}

/// Parse manifest text; `source` names it in errors and in `Pod::origin`.
pub fn parse_str(text: &str, source: &str) -> Result<Vec<Pod>, ManifestError> {
    parse_str_for(text, source, KubeletVersion::NEWEST)
}

/// [`parse_str`] with `version`'s rules for what the kubelet admitted.
pub(crate) fn parse_str_for(
    text: &str,
    source: &str,
    version: KubeletVersion,
) -> Result<Vec<Pod>, ManifestError> {
    let fail = |message: String| ManifestError {
        file: PathBuf::from(source),
        message,
    };
    qosd_model::core::limits::check_nesting(text, qosd_model::core::limits::MAX_NESTING)
        .map_err(fail)?;
    match parse_streaming(text, source, version) {
        Streamed::Pods(pods) => {
            check_unique_uids(&pods)?;
            Ok(pods)
        }
        Streamed::Failed(message) => Err(fail(message)),
        Streamed::Whole => parse_whole(text, source, version),
    }
}

/// What reading a text document by document gave.
enum Streamed {
    Pods(Vec<Pod>),
    /// The message, as [`parse_whole`] words it.
    Failed(String),
    /// Something unusual: read it with [`parse_whole`].
    Whole,
}

/// Read `text` one document and one list item at a time (see
/// [`stream`]): each document's tree is dropped once walked, and a list's
/// items never exist as one tree. Errors are those of [`parse_whole`]:
/// syntax first, then the first document's error, numbered when there are
/// several documents.
fn parse_streaming(text: &str, source: &str, version: KubeletVersion) -> Streamed {
    let json = source.ends_with(".json") || looks_like_json(text);
    let items_at = At::root().field("items");
    let item = |v: &Value, i: usize| list_item(v, &items_at.index(i), source, version);
    let mut pods = Vec::new();
    let mut first_err: Option<(usize, String)> = None;
    let mut count = 0usize;
    let mut on_doc = |doc: stream::Doc| {
        count += 1;
        if first_err.is_some() {
            return;
        }
        let before = pods.len();
        let r = match doc {
            stream::Doc::Whole(v) => document(&v, source, version, &mut pods),
            stream::Doc::Streamed { obj, items } => {
                streamed_document(obj, items, source, version, &mut pods)
            }
        };
        if let Err(e) = r {
            pods.truncate(before);
            first_err = Some((count, e));
        }
    };
    match stream::read(text, json, &item, &mut on_doc) {
        Ok(()) => {}
        Err(stream::Error::Parse(message)) => return Streamed::Failed(message),
        Err(stream::Error::Whole) => return Streamed::Whole,
    }
    match first_err {
        Some((n, e)) if count > 1 => Streamed::Failed(format!("document {n}: {e}")),
        Some((_, e)) => Streamed::Failed(e),
        None => Streamed::Pods(pods),
    }
}

/// Parse `text` as whole trees, all documents first, then walk them.
fn parse_whole(
    text: &str,
    source: &str,
    version: KubeletVersion,
) -> Result<Vec<Pod>, ManifestError> {
    let fail = |message: String| ManifestError {
        file: PathBuf::from(source),
        message,
    };
    let docs = parse_documents(text, source).map_err(fail)?;
    let many = docs.len() > 1;
    let mut pods = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let before = pods.len();
        let r = document(doc, source, version, &mut pods);
        if let Err(e) = r {
            pods.truncate(before);
            let msg = if many {
                format!("document {}: {}", i + 1, e)
            } else {
                e.to_string()
            };
            return Err(fail(msg));
        }
    }
    check_unique_uids(&pods)?;
    Ok(pods)
}

/// The embedded example pods (fixtures/pods), for `qosd plan` with no input.
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
    (
        "fixtures/pods/01-qos-demo.yaml",
        include_str!("../../../fixtures/pods/01-qos-demo.yaml"),
    ),
    (
        "fixtures/pods/02-qos-demo-2.yaml",
        include_str!("../../../fixtures/pods/02-qos-demo-2.yaml"),
    ),
    (
        "fixtures/pods/03-qos-demo-3.yaml",
        include_str!("../../../fixtures/pods/03-qos-demo-3.yaml"),
    ),
    (
        "fixtures/pods/04-frontend.yaml",
        include_str!("../../../fixtures/pods/04-frontend.yaml"),
    ),
    (
        "fixtures/pods/05-limits-only.yaml",
        include_str!("../../../fixtures/pods/05-limits-only.yaml"),
    ),
    (
        "fixtures/pods/06-init-containers.yaml",
        include_str!("../../../fixtures/pods/06-init-containers.yaml"),
    ),
    (
        "fixtures/pods/07-sidecar.yaml",
        include_str!("../../../fixtures/pods/07-sidecar.yaml"),
    ),
    (
        "fixtures/pods/08-pod-level-resources.yaml",
        include_str!("../../../fixtures/pods/08-pod-level-resources.yaml"),
    ),
    (
        "fixtures/pods/09-overhead.yaml",
        include_str!("../../../fixtures/pods/09-overhead.yaml"),
    ),
    (
        "fixtures/pods/10-multi-doc.yaml",
        include_str!("../../../fixtures/pods/10-multi-doc.yaml"),
    ),
    (
        "fixtures/pods/11-list.yaml",
        include_str!("../../../fixtures/pods/11-list.yaml"),
    ),
    (
        "fixtures/pods/12-pod.json",
        include_str!("../../../fixtures/pods/12-pod.json"),
    ),
    (
        "fixtures/pods/13-no-uid.yaml",
        include_str!("../../../fixtures/pods/13-no-uid.yaml"),
    ),
    (
        "fixtures/pods/14-static-pod.yaml",
        include_str!("../../../fixtures/pods/14-static-pod.yaml"),
    ),
    (
        "fixtures/pods/15-ephemeral-only.yaml",
        include_str!("../../../fixtures/pods/15-ephemeral-only.yaml"),
    ),
];

/// Parse the embedded example pods (same result as loading fixtures/pods).
pub fn example_pods() -> Vec<Pod> {
    EXAMPLES
        .iter()
        .flat_map(|(name, text)| {
            parse_str(text, name).unwrap_or_else(|e| panic!("embedded example is invalid: {e}"))
        })
        .collect()
}

// ---------------------------------------------------------------- parsing

fn looks_like_json(text: &str) -> bool {
    matches!(text.trim_start().chars().next(), Some('{' | '['))
}

fn parse_documents(text: &str, source: &str) -> Result<Vec<Value>, String> {
    if source.ends_with(".json") || looks_like_json(text) {
        return serde_json::from_str::<Value>(text)
            .map(|v| vec![v])
            .map_err(|e| format!("invalid JSON: {e}"));
    }
    use serde::Deserialize;
    let mut out = Vec::new();
    for de in yaml_serde::Deserializer::from_str(text) {
        let v = yaml_serde::Value::deserialize(de).map_err(|e| format!("invalid YAML: {e}"))?;
        out.push(yaml_to_json(v)?);
    }
    Ok(out)
}

fn yaml_to_json(v: yaml_serde::Value) -> Result<Value, String> {
    use yaml_serde::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                serde_json::Number::from_f64(f)
                    .map(Value::Number)
                    .unwrap_or_else(|| Value::String(f.to_string()))
            }
        }
        Y::String(s) => Value::String(s),
        Y::Sequence(seq) => Value::Array(
            seq.into_iter()
                .map(yaml_to_json)
                .collect::<Result<_, _>>()?,
        ),
        Y::Mapping(m) => {
            let mut obj = serde_json::Map::new();
            for (k, v) in m {
                let key = match k {
                    Y::String(s) => s,
                    Y::Number(n) => n.to_string(),
                    Y::Bool(b) => b.to_string(),
                    other => return Err(format!("unsupported mapping key {other:?}")),
                };
                obj.insert(key, yaml_to_json(v)?);
            }
            Value::Object(obj)
        }
        Y::Tagged(t) => yaml_to_json(t.value)?,
    })
}

/// A field path for messages: `spec.containers[0].resources`.
#[derive(Clone)]
struct At(String);

impl At {
    fn root() -> At {
        At(String::new())
    }
    fn field(&self, name: &str) -> At {
        if self.0.is_empty() {
            At(name.to_string())
        } else {
            At(format!("{}.{name}", self.0))
        }
    }
    fn index(&self, i: usize) -> At {
        At(format!("{}[{i}]", self.0))
    }
    fn err(&self, msg: impl std::fmt::Display) -> String {
        if self.0.is_empty() {
            msg.to_string()
        } else {
            format!("{}: {msg}", self.0)
        }
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

type Obj = serde_json::Map<String, Value>;

fn as_obj<'a>(v: &'a Value, at: &At) -> Result<&'a Obj, String> {
    v.as_object()
        .ok_or_else(|| at.err(format!("expected a mapping, got {}", type_name(v))))
}

/// Optional field: absent or null → None.
fn get<'a>(o: &'a Obj, name: &str) -> Option<&'a Value> {
    o.get(name).filter(|v| !v.is_null())
}

fn opt_str(o: &Obj, name: &str, at: &At) -> Result<Option<String>, String> {
    match get(o, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(at
            .field(name)
            .err(format!("expected a string, got {}", type_name(v)))),
    }
}

fn opt_int(o: &Obj, name: &str, at: &At) -> Result<Option<i64>, String> {
    match get(o, name) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| at.field(name).err(format!("expected an integer, got {n}"))),
        Some(v) => Err(at
            .field(name)
            .err(format!("expected an integer, got {}", type_name(v)))),
    }
}

fn opt_list<'a>(o: &'a Obj, name: &str, at: &At) -> Result<&'a [Value], String> {
    match get(o, name) {
        None => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(v) => Err(at
            .field(name)
            .err(format!("expected a list, got {}", type_name(v)))),
    }
}

fn document(
    doc: &Value,
    source: &str,
    version: KubeletVersion,
    out: &mut Vec<Pod>,
) -> Result<(), String> {
    if doc.is_null() {
        return Ok(());
    }
    let at = At::root();
    let o = as_obj(doc, &at)?;
    let kind = opt_str(o, "kind", &at)?;
    match kind.as_deref() {
        Some("Pod") => out.push(live_pod(o, &at, source, version)?),
        Some(k) if k.ends_with("List") => {
            let items_at = at.field("items");
            let items = opt_list(o, "items", &at)?.iter().enumerate();
            let items = items.map(|(i, item)| list_item(item, &items_at.index(i), source, version));
            list_items(k, items, out)?
        }
        Some(w) if WORKLOADS.contains(&w) => out.push(template_pod(o, &at, w, source)?),
        Some(_) => {} // Service, ConfigMap, ...: skipped
        None => {
            return Err(at
                .field("kind")
                .err("missing (expected Pod, PodList or List)"))
        }
    }
    Ok(())
}

/// A document read with its `items` apart (see [`stream`]).
fn streamed_document(
    obj: Obj,
    items: Vec<Item>,
    source: &str,
    version: KubeletVersion,
    out: &mut Vec<Pod>,
) -> Result<(), String> {
    match opt_str(&obj, "kind", &At::root())? {
        Some(k) if k.ends_with("List") => list_items(&k, items.into_iter(), out),
        // Not a list: its `items`, whatever they are, are not read.
        _ => document(&Value::Object(obj), source, version, out),
    }
}

/// One item of a list, read before the list's kind is known (`kind`
/// often comes after `items`).
enum Item {
    /// A pod, a workload's pod, or the item's error, whatever the list.
    Done(Result<Pod, String>),
    /// No `kind`: the pod it is in a `PodList` (an error in a `List`).
    NoKind(Result<Pod, String>),
    /// Not a pod (a Service, ...).
    Skipped,
}

impl Item {
    /// Whether the item is an error in any list.
    fn is_error(&self) -> bool {
        matches!(self, Item::Done(Err(_)) | Item::NoKind(Err(_)))
    }
}

fn list_item(item: &Value, iat: &At, source: &str, version: KubeletVersion) -> Item {
    let io = match as_obj(item, iat) {
        Ok(io) => io,
        Err(e) => return Item::Done(Err(e)),
    };
    match opt_str(io, "kind", iat).as_ref().map(|k| k.as_deref()) {
        Err(e) => Item::Done(Err(e.clone())),
        Ok(Some("Pod")) => Item::Done(live_pod(io, iat, source, version)),
        Ok(Some(w)) if WORKLOADS.contains(&w) => Item::Done(template_pod(io, iat, w, source)),
        Ok(None) => Item::NoKind(live_pod(io, iat, source, version)),
        Ok(Some(_)) => Item::Skipped,
    }
}

/// The pods of a list of kind `kind` (`List`, `PodList`, ...), in order;
/// the first item's error.
fn list_items(
    kind: &str,
    items: impl Iterator<Item = Item>,
    out: &mut Vec<Pod>,
) -> Result<(), String> {
    let items_at = At::root().field("items");
    for (i, item) in items.enumerate() {
        match item {
            Item::Done(r) => out.push(r?),
            Item::NoKind(r) if kind == "PodList" => out.push(r?),
            Item::NoKind(_) => return Err(items_at.index(i).field("kind").err("missing")),
            Item::Skipped => {}
        }
    }
    Ok(())
}

/// Workload kinds whose pod template is read as a pod (named after the
/// workload, with a derived uid; `Pod::origin` says `file#Kind/name`).
pub(crate) const WORKLOADS: &[&str] = &[
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
];

/// The pod of a workload's template (`spec.template`; a CronJob's
/// `spec.jobTemplate.spec.template`).
fn template_pod(o: &Obj, at: &At, kind: &str, source: &str) -> Result<Pod, String> {
    let mat = at.field("metadata");
    let meta = match get(o, "metadata") {
        Some(m) => as_obj(m, &mat)?,
        None => return Err(mat.err("missing")),
    };
    let name = opt_str(meta, "name", &mat)?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| mat.field("name").err("missing"))?;
    let namespace = opt_str(meta, "namespace", &mat)?;
    let path: &[&str] = if kind == "CronJob" {
        &["spec", "jobTemplate", "spec", "template"]
    } else {
        &["spec", "template"]
    };
    let mut cur = o;
    let mut tat = At(at.0.clone());
    for f in path {
        tat = tat.field(f);
        cur = match get(cur, f) {
            Some(v) => as_obj(v, &tat)?,
            None => return Err(tat.err("missing (a workload needs a pod template)")),
        };
    }
    let mut tmeta = match get(cur, "metadata") {
        Some(m) => as_obj(m, &tat.field("metadata"))?.clone(),
        None => Obj::new(),
    };
    tmeta.insert("name".into(), Value::String(name.clone()));
    tmeta.remove("uid");
    match namespace {
        Some(ns) => tmeta.insert("namespace".into(), Value::String(ns)),
        None => tmeta.remove("namespace"),
    };
    let mut t = cur.clone();
    t.insert("metadata".into(), Value::Object(tmeta));
    pod(&t, &tat, &format!("{source}#{kind}/{name}"))
}

/// The deterministic uid of a pod whose manifest has none.
pub(crate) fn derived_uid(namespace: &str, name: &str) -> String {
    let ns = uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_URL,
        b"https://github.com/qosd/qosd/pod-uid",
    );
    uuid::Uuid::new_v5(&ns, format!("{namespace}/{name}").as_bytes()).to_string()
}

/// A Pod document: its spec, with the resources the kubelet admitted when
/// it has a status.
fn live_pod(o: &Obj, at: &At, source: &str, version: KubeletVersion) -> Result<Pod, String> {
    let desired = pod(o, at, source)?;
    let status = pod_status(o, at)?;
    Ok(crate::admitted::admit(desired, &status, version))
}

/// What `status` (and `metadata.generation`) say about the resources.
fn pod_status(o: &Obj, at: &At) -> Result<crate::admitted::PodStatus, String> {
    use crate::admitted::{Condition, ContainerStatus, PodStatus};
    let mut out = PodStatus::default();
    if let Some(m) = get(o, "metadata") {
        out.generation = opt_int(
            as_obj(m, &at.field("metadata"))?,
            "generation",
            &at.field("metadata"),
        )?;
    }
    let sat = at.field("status");
    let Some(st) = get(o, "status") else {
        return Ok(out);
    };
    let st = as_obj(st, &sat)?;
    out.observed_generation = opt_int(st, "observedGeneration", &sat)?;
    let cat = sat.field("conditions");
    for (i, c) in opt_list(st, "conditions", &sat)?.iter().enumerate() {
        let iat = cat.index(i);
        let c = as_obj(c, &iat)?;
        if opt_str(c, "status", &iat)?.as_deref() != Some("True") {
            continue;
        }
        let cond = Condition {
            reason: opt_str(c, "reason", &iat)?.unwrap_or_default(),
            message: opt_str(c, "message", &iat)?.unwrap_or_default(),
        };
        match opt_str(c, "type", &iat)?.as_deref() {
            Some("PodResizePending") => out.pending = Some(cond),
            Some("PodResizeInProgress") => out.in_progress = Some(cond),
            _ => {}
        }
    }
    for field in ["containerStatuses", "initContainerStatuses"] {
        let lat = sat.field(field);
        for (i, c) in opt_list(st, field, &sat)?.iter().enumerate() {
            let iat = lat.index(i);
            let c = as_obj(c, &iat)?;
            let name = opt_str(c, "name", &iat)?.unwrap_or_default();
            let status = ContainerStatus {
                allocated: get(c, "allocatedResources")
                    .map(|v| resource_list(v, &iat.field("allocatedResources")))
                    .transpose()?,
                actual: get(c, "resources")
                    .map(|v| status_requirements(v, &iat.field("resources")))
                    .transpose()?,
            };
            out.containers.insert(name, status);
        }
    }
    out.pod_allocated = get(st, "allocatedResources")
        .map(|v| resource_list(v, &sat.field("allocatedResources")))
        .transpose()?;
    out.pod_actual = get(st, "resources")
        .map(|v| status_requirements(v, &sat.field("resources")))
        .transpose()?;
    Ok(out)
}

/// `resources` of a status: what is applied, taken as reported (no
/// defaulting, no request ≤ limit check).
fn status_requirements(v: &Value, at: &At) -> Result<ResourceRequirements, String> {
    let o = as_obj(v, at)?;
    let list = |name: &str| match get(o, name) {
        None => Ok(ResourceList::new()),
        Some(l) => resource_list(l, &at.field(name)),
    };
    Ok(ResourceRequirements {
        requests: list("requests")?,
        limits: list("limits")?,
    })
}

fn pod(o: &Obj, at: &At, source: &str) -> Result<Pod, String> {
    let mat = at.field("metadata");
    let meta = match get(o, "metadata") {
        Some(m) => as_obj(m, &mat)?,
        None => return Err(mat.err("missing")),
    };
    let name = opt_str(meta, "name", &mat)?
        .filter(|n| !n.is_empty())
        .ok_or_else(|| mat.field("name").err("missing"))?;
    let namespace = opt_str(meta, "namespace", &mat)?
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let uid = opt_str(meta, "uid", &mat)?.filter(|u| !u.is_empty());
    if let Some(u) = &uid {
        // The same rule as for CRI sandboxes: a uid becomes a path.
        qosd_model::core::uid::validate_uid(u).map_err(|e| mat.field("uid").err(e))?;
    }
    let mut annotations = BTreeMap::new();
    if let Some(a) = get(meta, "annotations") {
        let aat = mat.field("annotations");
        for (k, v) in as_obj(a, &aat)? {
            match v {
                Value::String(s) => {
                    annotations.insert(k.clone(), s.clone());
                }
                other => {
                    return Err(aat
                        .field(k)
                        .err(format!("expected a string, got {}", type_name(other))))
                }
            }
        }
    }

    let sat = at.field("spec");
    let spec = match get(o, "spec") {
        Some(s) => as_obj(s, &sat)?,
        None => return Err(sat.err("missing")),
    };
    let containers = containers(spec, "containers", &sat, false)?;
    if containers.is_empty() {
        return Err(sat
            .field("containers")
            .err("a pod needs at least one container"));
    }
    let init_containers = containers_init(spec, &sat)?;
    let pod_resources = match get(spec, "resources") {
        None => None,
        Some(r) => {
            let r = requirements_with(r, &sat.field("resources"), false)?;
            (!r.requests.is_empty() || !r.limits.is_empty()).then_some(r)
        }
    };
    let overhead = match get(spec, "overhead") {
        None => ResourceList::new(),
        Some(v) => resource_list(v, &sat.field("overhead"))?,
    };
    let priority = match opt_int(spec, "priority", &sat)? {
        None => 0,
        Some(p) => i32::try_from(p)
            .map_err(|_| sat.field("priority").err(format!("{p} is out of range")))?,
    };
    let mut p = Pod::new(
        uid.clone()
            .unwrap_or_else(|| derived_uid(&namespace, &name)),
        namespace,
        name,
    );
    p.uid_derived = uid.is_none();
    p.containers = containers;
    p.init_containers = init_containers;
    p.pod_resources = pod_resources.map(|r| default_pod_level_requests(&p, r));
    p.overhead = overhead;
    p.priority = priority;
    p.priority_class_name = opt_str(spec, "priorityClassName", &sat)?;
    p.termination_grace_period_seconds = opt_int(spec, "terminationGracePeriodSeconds", &sat)?;
    p.annotations = annotations;
    p.origin = PodOrigin::Manifest(source.to_string());
    p.volumes = volumes(spec, &sat)?;
    Ok(p)
}

/// `spec.volumes`: names, and emptyDir medium / sizeLimit (what local
/// storage eviction needs).
fn volumes(spec: &Obj, sat: &At) -> Result<Vec<qosd_model::core::model::Volume>, String> {
    let vat = sat.field("volumes");
    let mut out = Vec::new();
    for (i, v) in opt_list(spec, "volumes", sat)?.iter().enumerate() {
        let at = vat.index(i);
        let o = as_obj(v, &at)?;
        let name = opt_str(o, "name", &at)?.ok_or_else(|| at.err("missing name"))?;
        let empty_dir = match get(o, "emptyDir") {
            None | Some(Value::Null) => None,
            Some(ed) => {
                let eat = at.field("emptyDir");
                let eo = as_obj(ed, &eat)?;
                let memory = opt_str(eo, "medium", &eat)?.as_deref() == Some("Memory");
                let size_limit = match get(eo, "sizeLimit") {
                    None | Some(Value::Null) => None,
                    Some(q) => {
                        let text = match q {
                            // Trimmed like `Quantity.UnmarshalJSON`.
                            Value::String(s) => s.trim().to_string(),
                            Value::Number(n) => n.to_string(),
                            other => {
                                return Err(eat
                                    .field("sizeLimit")
                                    .err(format!("expected a quantity, got {}", type_name(other))))
                            }
                        };
                        Some(Quantity::parse(&text).map_err(|e| eat.field("sizeLimit").err(e))?)
                    }
                };
                Some(qosd_model::core::model::EmptyDir { memory, size_limit })
            }
        };
        out.push(qosd_model::core::model::Volume { name, empty_dir });
    }
    Ok(out)
}

/// API-server defaulting of pod-level requests (`defaultPodRequests`),
/// only when pod-level limits are set: an unset cpu/memory request becomes
/// the containers' aggregate request when some container requests that
/// resource, else the pod-level limit.
fn default_pod_level_requests(pod: &Pod, mut r: ResourceRequirements) -> ResourceRequirements {
    if r.limits.is_empty() {
        return r;
    }
    for name in [
        qosd_model::core::resources::CPU,
        qosd_model::core::resources::MEMORY,
    ] {
        if r.requests.contains_key(name) {
            continue;
        }
        let value = qosd_model::core::resources::aggregate_container_request(pod, name)
            .or_else(|| r.limits.get(name).cloned());
        if let Some(v) = value {
            r.requests.insert(name.to_string(), v);
        }
    }
    r
}

fn containers_init(spec: &Obj, sat: &At) -> Result<Vec<Container>, String> {
    containers(spec, "initContainers", sat, true)
}

fn containers(spec: &Obj, field: &str, sat: &At, init: bool) -> Result<Vec<Container>, String> {
    let lat = sat.field(field);
    let mut out = Vec::new();
    for (i, c) in opt_list(spec, field, sat)?.iter().enumerate() {
        let cat = lat.index(i);
        let co = as_obj(c, &cat)?;
        let name = opt_str(co, "name", &cat)?.unwrap_or_default();
        let resources = match get(co, "resources") {
            None => ResourceRequirements::default(),
            Some(r) => requirements(r, &cat.field("resources"))?,
        };
        let restart = opt_str(co, "restartPolicy", &cat)?;
        let restartable = match restart.as_deref() {
            None => false,
            Some("Always") if init => true,
            Some(other) => {
                return Err(cat.field("restartPolicy").err(format!(
                    "{other:?} is not supported{}",
                    if init {
                        " (only \"Always\")"
                    } else {
                        " on app containers"
                    }
                )))
            }
        };
        out.push(Container {
            name,
            resources,
            restartable,
        });
    }
    Ok(out)
}

/// `resources: {requests, limits}` with API-server defaulting (request :=
/// limit when unset) and validation (non-negative, request ≤ limit).
fn requirements(v: &Value, at: &At) -> Result<ResourceRequirements, String> {
    requirements_with(v, at, true)
}

fn requirements_with(
    v: &Value,
    at: &At,
    default_requests: bool,
) -> Result<ResourceRequirements, String> {
    let o = as_obj(v, at)?;
    let mut requests = match get(o, "requests") {
        None => ResourceList::new(),
        Some(r) => resource_list(r, &at.field("requests"))?,
    };
    let limits = match get(o, "limits") {
        None => ResourceList::new(),
        Some(l) => resource_list(l, &at.field("limits"))?,
    };
    if let Err((kind, name, msg)) =
        qosd_model::policy::enforce::hugepages::validate(&requests, &limits)
    {
        return Err(at.field(kind).field(&name).err(msg));
    }
    for (name, req) in &requests {
        if let Some(lim) = limits.get(name) {
            if req > lim {
                return Err(at.field("requests").field(name).err(format!(
                    "request {req} must be less than or equal to the {name} limit {lim}"
                )));
            }
        }
    }
    if default_requests {
        for (name, lim) in &limits {
            requests.entry(name.clone()).or_insert_with(|| lim.clone());
        }
    }
    Ok(ResourceRequirements { requests, limits })
}

fn resource_list(v: &Value, at: &At) -> Result<ResourceList, String> {
    let o = as_obj(v, at)?;
    let mut out = ResourceList::new();
    for (name, q) in o {
        let qat = at.field(name);
        let text = match q {
            // Kubernetes' decoding (`Quantity.UnmarshalJSON`, also behind
            // YAML, which the API server turns into JSON) trims surrounding
            // whitespace before parsing: `" 100Mi "` is 100Mi.
            Value::String(s) => s.trim().to_string(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(qat.err(format!(
                    "expected a quantity (string or number), got {}",
                    type_name(other)
                )))
            }
        };
        let parsed = Quantity::parse(&text).map_err(|e| qat.err(e))?;
        if parsed.is_negative() {
            return Err(qat.err(format!("{text:?} must be greater than or equal to 0")));
        }
        out.insert(name.clone(), parsed);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::QosClass;
    use qosd_model::core::qos::classify;

    fn one(text: &str) -> Pod {
        let mut v = parse_str(text, "t.yaml").unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0)
    }

    fn err(text: &str) -> String {
        parse_str(text, "bad.yaml").unwrap_err().to_string()
    }

    const QOS_DEMO: &str = "
apiVersion: v1
kind: Pod
metadata:
  name: qos-demo
  namespace: qos-example
  uid: 11111111-2222-3333-4444-555555555555
  extra: ignored
spec:
  priority: 10
  priorityClassName: high
  terminationGracePeriodSeconds: 30
  containers:
  - name: qos-demo-ctr
    image: nginx
    resources:
      limits:
        memory: 200Mi
        cpu: 700m
      requests:
        memory: 200Mi
        cpu: 0.7
";

    #[test]
    fn single_pod() {
        let p = one(QOS_DEMO);
        assert_eq!(p.name, "qos-demo");
        assert_eq!(p.namespace, "qos-example");
        assert_eq!(p.uid, "11111111-2222-3333-4444-555555555555");
        assert!(!p.uid_derived);
        assert_eq!(p.priority, 10);
        assert_eq!(p.priority_class_name.as_deref(), Some("high"));
        assert_eq!(p.termination_grace_period_seconds, Some(30));
        assert_eq!(p.containers[0].resources.requests["cpu"].milli_ceil(), 700);
        assert_eq!(classify(&p).class, QosClass::Guaranteed);
        assert_eq!(p.origin, PodOrigin::Manifest("t.yaml".into()));
    }

    /// apimachinery `Quantity.UnmarshalJSON` trims surrounding whitespace
    /// (`ParseQuantity(strings.TrimSpace(..))`); inner whitespace and
    /// other junk stay errors.
    #[test]
    fn quantity_whitespace_like_kubernetes_json_decoding() {
        for (q, ok_bytes) in [
            ("\" 100Mi\"", Some(100 << 20)),
            ("\"100Mi \"", Some(100 << 20)),
            ("\"\\t1Gi\\n\"", Some(1 << 30)),
            ("\"  2  \"", Some(2)),
            ("\"1 Gi\"", None),
            ("\" \"", None),
            ("\"\"", None),
        ] {
            let json = format!(
                "{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"a\"}},\"spec\":{{\"containers\":[{{\"name\":\"c\",\"resources\":{{\"requests\":{{\"memory\":{q}}}}}}}],\"volumes\":[{{\"name\":\"v\",\"emptyDir\":{{\"sizeLimit\":{q}}}}}]}}}}"
            );
            match (parse_str(&json, "p.json"), ok_bytes) {
                (Ok(pods), Some(b)) => {
                    let p = &pods[0];
                    assert_eq!(
                        p.containers[0].resources.requests["memory"].value_ceil(),
                        b,
                        "{q}"
                    );
                    let size = p.volumes[0].empty_dir.as_ref().unwrap().size_limit.as_ref();
                    assert_eq!(size.unwrap().value_ceil(), b, "{q}");
                }
                (Err(e), None) => assert!(e.to_string().contains("memory"), "{q}: {e}"),
                (got, want) => panic!("{q}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn numbers_as_quantities_and_defaulting() {
        let p = one("kind: Pod\nmetadata: {name: a}\nspec:\n  containers:\n  - name: c\n    resources:\n      limits: {cpu: 2, memory: 1073741824}\n");
        assert_eq!(p.namespace, "default");
        assert!(p.uid_derived);
        assert_eq!(p.uid, derived_uid("default", "a"));
        assert_eq!(p.containers[0].resources.requests["cpu"].milli_ceil(), 2000);
        assert_eq!(classify(&p).class, QosClass::Guaranteed);
    }

    #[test]
    fn workloads_by_pod_template() {
        let pods = parse_str(
            "kind: Deployment\nmetadata: {name: web, namespace: shop}\nspec:\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, resources: {limits: {cpu: 1, memory: 1Gi}}}]}\n---\nkind: CronJob\nmetadata: {name: nightly}\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec: {containers: [{name: c}]}\n---\nkind: List\nitems:\n- kind: StatefulSet\n  metadata: {name: db}\n  spec: {template: {spec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}}}\n",
            "w.yaml",
        )
        .unwrap();
        let got: Vec<(&str, &str, QosClass)> = pods
            .iter()
            .map(|p| (p.namespace.as_str(), p.name.as_str(), classify(p).class))
            .collect();
        assert_eq!(
            got,
            [
                ("shop", "web", QosClass::Guaranteed),
                ("default", "nightly", QosClass::BestEffort),
                ("default", "db", QosClass::Burstable),
            ]
        );
        assert_eq!(
            pods[0].origin,
            PodOrigin::Manifest("w.yaml#Deployment/web".into())
        );
        let e = parse_str(
            "kind: DaemonSet\nmetadata: {name: d}\nspec: {template: {spec: {containers: [{name: c, resources: {limits: {cpu: x}}}]}}}\n",
            "d.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("spec.template.spec.containers[0].resources.limits.cpu"),
            "{e}"
        );
    }

    #[test]
    fn lists_multi_doc_json_and_skips() {
        let pods = parse_str(
            "kind: Service\nmetadata: {name: s}\n---\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\n---\nkind: List\nitems:\n- kind: Pod\n  metadata: {name: b}\n  spec: {containers: [{name: c}]}\n- kind: ConfigMap\n",
            "m.yaml",
        )
        .unwrap();
        assert_eq!(
            pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let pods = parse_str(
            r#"{"kind":"PodList","items":[{"metadata":{"name":"j"},"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"100m"}}}]}}]}"#,
            "x.json",
        )
        .unwrap();
        assert_eq!(pods[0].name, "j");
        assert_eq!(classify(&pods[0]).class, QosClass::Burstable);
    }

    #[test]
    fn pod_level_request_defaulting() {
        let p = one("kind: Pod\nmetadata: {name: a}\nspec:\n  resources: {limits: {cpu: 2, memory: 1Gi}}\n  containers:\n  - {name: c, resources: {requests: {cpu: 300m}}}\n  - {name: d, resources: {requests: {cpu: 200m}}}\n");
        let r = p.pod_resources.as_ref().unwrap();
        assert_eq!(r.requests["cpu"].milli_ceil(), 500, "from the containers");
        assert_eq!(
            r.requests["memory"].value_ceil(),
            1 << 30,
            "from the pod limit"
        );
        assert_eq!(classify(&p).class, QosClass::Burstable);
        let p = one("kind: Pod\nmetadata: {name: a}\nspec:\n  resources: {requests: {cpu: 1}}\n  containers: [{name: c}]\n");
        let r = p.pod_resources.as_ref().unwrap();
        assert!(r.limits.is_empty() && r.requests.len() == 1);
    }

    #[test]
    fn init_and_sidecars() {
        let p = one("kind: Pod\nmetadata: {name: a}\nspec:\n  initContainers:\n  - {name: proxy, restartPolicy: Always}\n  - {name: setup}\n  containers: [{name: c}]\n");
        assert!(p.init_containers[0].restartable);
        assert!(!p.init_containers[1].restartable);
    }

    #[test]
    fn errors_name_the_field() {
        let base = |res: &str| {
            format!("kind: Pod\nmetadata: {{name: a}}\nspec:\n  containers:\n  - name: c\n    resources: {res}\n")
        };
        let cases = [
            (base("{limits: {cpu: 1.2.3}}"), "bad.yaml: spec.containers[0].resources.limits.cpu: invalid quantity \"1.2.3\""),
            (base("{requests: {memory: 10Qi}}"), "spec.containers[0].resources.requests.memory: invalid quantity \"10Qi\""),
            (base("{requests: {cpu: [1]}}"), "spec.containers[0].resources.requests.cpu: expected a quantity (string or number), got a list"),
            (base("{requests: {cpu: -1}}"), "spec.containers[0].resources.requests.cpu: \"-1\" must be greater than or equal to 0"),
            (base("{requests: {cpu: 2}, limits: {cpu: 1}}"), "spec.containers[0].resources.requests.cpu: request 2 must be less than or equal to the cpu limit 1"),
            (base("[]"), "spec.containers[0].resources: expected a mapping, got a list"),
            ("kind: Pod\nmetadata: {name: a}\nspec: {containers: {}}\n".to_string(), "spec.containers: expected a list, got a mapping"),
            ("kind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n".to_string(), "spec.containers: a pod needs at least one container"),
            ("kind: Pod\nmetadata: {name: 5}\nspec: {containers: []}\n".to_string(), "metadata.name: expected a string, got a number"),
            ("kind: Pod\nmetadata: {name: a}\nspec: {priority: high, containers: [{name: c}]}\n".to_string(), "spec.priority: expected an integer, got a string"),
            ("kind: Pod\nspec: {}\n".to_string(), "metadata: missing"),
            ("metadata: {name: a}\n".to_string(), "kind: missing"),
            ("kind: Pod\nmetadata: {name: a\n".to_string(), "bad.yaml: invalid YAML"),
            ("kind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n  spec: {containers: [{name: c, resources: {limits: {memory: x}}}]}\n".to_string(), "items[0].spec.containers[0].resources.limits.memory: invalid quantity"),
            ("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, restartPolicy: Always}]}\n".to_string(), "document 2: spec.containers[0].restartPolicy"),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.contains(want), "got {e:?}, want {want:?}");
        }
    }

    #[test]
    fn files_and_directories() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("b.yaml"), QOS_DEMO).unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(
            d.path().join("sub/a.json"),
            r#"{"kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c"}]}}"#,
        )
        .unwrap();
        std::fs::write(d.path().join("notes.txt"), "not a manifest").unwrap();
        let pods = load_paths(&[d.path().to_path_buf()]).unwrap();
        assert_eq!(
            pods.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["qos-demo", "j"]
        );
        let missing = d.path().join("missing.yaml");
        let e = load_paths(std::slice::from_ref(&missing)).unwrap_err();
        assert_eq!(e.file, missing);
        assert!(e.to_string().contains("cannot read"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,64}") {
            let _ = parse_str(&s, "fuzz.yaml");
            let _ = parse_str(&s, "fuzz.json");
        }

        /// Lists made of pieces that stress the item-by-item reading
        /// (kind after items, entries at column 0, anchors, comments):
        /// the same result as whole trees.
        #[test]
        fn streaming_matches_whole_trees_on_noise(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "- kind: Pod\n", "  metadata: {name: a}\n", "  metadata:\n    name: b\n",
                "  spec: {containers: [{name: c}]}\n", "- &x {kind: Pod}\n", "- *x\n",
                "kind: List\n", "kind: PodList\n", "items:\n", "# note\n", "\n", "---\n",
                "- \"q\n", "x\"\n", "  uid: u1\n", "- kind: Service\n", "-\n", "  - 1\n",
                "{\"items\": [", "{\"kind\": \"Pod\"}", ", ", "], \"kind\": \"List\"}",
            ]), 0..12),
        ) {
            let text = parts.concat();
            for source in ["n.yaml", "n.json"] {
                let whole = parse_whole(&text, source, KubeletVersion::NEWEST);
                let got = parse_str(&text, source);
                proptest::prop_assert_eq!(format!("{:?}", got), format!("{:?}", whole), "{}", text);
            }
        }

        #[test]
        fn quantities_round_trip_through_yaml(m in 0i64..10_000_000) {
            let text = format!("kind: Pod\nmetadata: {{name: a}}\nspec:\n  containers:\n  - name: c\n    resources: {{requests: {{cpu: {m}m}}}}\n");
            let p = parse_str(&text, "t.yaml").unwrap();
            proptest::prop_assert_eq!(p[0].containers[0].resources.requests["cpu"].milli_ceil(), m);
        }
    }

    #[test]
    fn volumes_and_storage_limits() {
        let p = one(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: v, uid: u1}\nspec:\n  containers:\n  - name: c\n    resources: {limits: {ephemeral-storage: 64Mi}}\n  volumes:\n  - name: scratch\n    emptyDir: {sizeLimit: 10Mi}\n  - name: ram\n    emptyDir: {medium: Memory}\n  - name: cfg\n    configMap: {name: x}\n",
        );
        assert_eq!(p.volumes.len(), 3);
        let ed = p.volumes[0].empty_dir.as_ref().unwrap();
        assert_eq!(ed.size_limit.as_ref().unwrap().value_ceil(), 10 << 20);
        assert!(!ed.memory);
        assert!(p.volumes[1].empty_dir.as_ref().unwrap().memory);
        assert!(p.volumes[2].empty_dir.is_none());
        assert_eq!(
            p.containers[0].resources.limits["ephemeral-storage"].value_ceil(),
            64 << 20
        );
    }

    /// `kubectl get pod -o json` of a Guaranteed pod whose resize to 2 CPUs
    /// / 2Gi the kubelet refused (static CPU manager): the pod keeps the
    /// 1 CPU / 1Gi it was admitted with; the spec's values are the desired.
    const RESIZED: &str = r#"{"apiVersion":"v1","kind":"Pod",
      "metadata":{"name":"g","namespace":"ns","uid":"7d1c0e2a-0000-4000-8000-000000000001","generation":2},
      "spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"2","memory":"2Gi"},"limits":{"cpu":"2","memory":"2Gi"}}}]},
      "status":{"phase":"Running","qosClass":"Guaranteed","observedGeneration":2,
        "conditions":[{"type":"Ready","status":"True"},
          {"type":"PodResizePending","status":"True","reason":"Infeasible",
           "message":"Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""}],
        "containerStatuses":[{"name":"app","allocatedResources":{"cpu":"1","memory":"1Gi"},
          "resources":{"requests":{"cpu":"1","memory":"1Gi"},"limits":{"cpu":"1","memory":"1Gi"}}}]}}"#;

    #[test]
    fn status_gives_the_admitted_resources() {
        let p = parse_str(RESIZED, "g.json").unwrap().remove(0);
        let r = &p.containers[0].resources;
        assert_eq!(r.limits["cpu"].milli_ceil(), 1000);
        assert_eq!(r.limits["memory"].value_ceil(), 1 << 30);
        assert_eq!(r.requests["memory"].value_ceil(), 1 << 30);
        assert_eq!(classify(&p).class, QosClass::Guaranteed);
        let rs = p.resize.as_ref().unwrap();
        assert_eq!(rs.state, qosd_model::core::model::ResizeState::Infeasible);
        assert!(rs.message.as_deref().unwrap().contains("CPU Manager"));
        assert_eq!(rs.desired["app"].limits["cpu"].milli_ceil(), 2000);
        // Without the status: the spec.
        let mut v: Value = serde_json::from_str(RESIZED).unwrap();
        v.as_object_mut().unwrap().remove("status");
        let p = parse_str(&v.to_string(), "g.json").unwrap().remove(0);
        assert_eq!(p.containers[0].resources.limits["cpu"].milli_ceil(), 2000);
        assert!(p.resize.is_none());
        // A bad status quantity names its field.
        let bad = RESIZED.replace(
            r#""allocatedResources":{"cpu":"1""#,
            r#""allocatedResources":{"cpu":"x""#,
        );
        let e = parse_str(&bad, "g.json").unwrap_err().to_string();
        assert!(
            e.contains("status.containerStatuses[0].allocatedResources.cpu: invalid quantity"),
            "{e}"
        );
    }

    #[test]
    fn examples_parse() {
        let pods = example_pods();
        assert!(pods.len() >= 15);
        let classes: std::collections::BTreeSet<_> =
            pods.iter().map(|p| classify(p).class).collect();
        assert_eq!(classes.len(), 3);
        // same as loading the directory
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fixtures/pods");
        let from_disk = load_paths(&[dir]).unwrap();
        assert_eq!(
            from_disk.len(),
            pods.len(),
            "EXAMPLES must list every fixture"
        );
    }

    /// Reading item by item gives what reading whole trees gives: the
    /// same pods, the same errors, word for word.
    #[test]
    fn streaming_matches_whole_trees() {
        let pod = |name: &str, extra: &str| {
            format!(
                "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: {name}\n    uid: u-{name}\n  spec:\n    containers:\n    - name: c\n      resources:\n        limits: {{cpu: \"1\", memory: 1Gi}}\n{extra}"
            )
        };
        let list =
            |items: &str| format!("apiVersion: v1\nitems:\n{items}kind: List\nmetadata: {{}}\n");
        let texts: Vec<(String, &str, bool)> = vec![
            // Typical: read item by item (no whole-tree reading).
            (list(&(pod("a", "") + &pod("b", ""))), "l.yaml", true),
            (list(&(pod("a", "# a comment\n") + "\n" + &pod("b", ""))), "l.yaml", true),
            (list(&pod("a", "    priority: x\n")), "l.yaml", true),
            (list("- apiVersion: v1\n  kind: Service\n  metadata: {name: s}\n"), "l.yaml", true),
            (list("- apiVersion: v1\n  metadata: {name: s}\n"), "l.yaml", true),
            (r#"{"items": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}], "kind": "PodList"}"#.into(), "l.json", true),
            (r#"{"items": [{"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}}], "kind": "List"}"#.into(), "l.json", true),
            (r#"{"items": [{"kind": "Pod", "metadata": {"name": "a"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1.2.3"}}}]}}], "kind": "List"}"#.into(), "l.json", true),
            (r#"{"items": [{"kind": "Pod"}], "kind": "Service"}"#.into(), "l.json", true),
            (r#"{"items": [], "kind": 3}"#.into(), "l.json", true),
            (r#"{"items": [1, {"kind": "Pod"}], "kind": "List"}"#.into(), "l.json", true),
            (r#"{"items": [{"kind": "Pod"}], "kind": "List"} x"#.into(), "l.json", true),
            (r#"{"items": [{"kind": "Pod",}], "kind": "List"}"#.into(), "l.json", true),
            ("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c}]}\n---\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, resources: {limits: {cpu: bad}}}]}\n---\n".into(), "d.yaml", true),
            ("kind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, resources: {limits: {cpu: bad}}}]}\n---\nkind: [\n".into(), "d.yaml", true),
            // Unusual: read as whole trees.
            (r#"{"items": [], "items": [{"kind": "Pod"}], "kind": "List"}"#.into(), "l.json", false),
            (r#"{"items": null, "kind": "List"}"#.into(), "l.json", false),
            (r#"{"items": {"a": 1}, "kind": "List"}"#.into(), "l.json", false),
            (r#"[{"kind": "Pod"}]"#.into(), "l.json", false),
            ("kind: List\nkind: List\nitems: []\n".into(), "l.yaml", false),
            ("1: x\nkind: List\nitems: []\n".into(), "l.yaml", false),
            ("!foo\nkind: List\nitems: []\n".into(), "l.yaml", false),
            ("kind: List\nitems: !bar []\n".into(), "l.yaml", false),
            ("kind: List\nitems:\n- kind: Pod\n  metadata: {name: a, ~: 1}\n  spec: {containers: [{name: c}]}\n".into(), "l.yaml", false),
            // Anchors across items: whole document.
            (list(&(pod("a", "  x: &r {cpu: \"1\"}\n") + "- kind: Pod\n  metadata: {name: b}\n  spec: {containers: [{name: c, resources: {limits: *r}}]}\n")), "l.yaml", true),
            (list("- kind: Pod\n  metadata: {name: \"a\n- b\"}\n  spec: {containers: [{name: c}]}\n"), "l.yaml", true),
        ];
        for (text, source, streamed) in &texts {
            let whole = parse_whole(text, source, KubeletVersion::NEWEST);
            let got = parse_str(text, source);
            assert_eq!(format!("{got:?}"), format!("{whole:?}"), "{text}");
            let s = parse_streaming(text, source, KubeletVersion::NEWEST);
            assert_eq!(!matches!(s, Streamed::Whole), *streamed, "{text}");
        }
    }
}
