//! `qosd classify`: each pod's QoS class and why ("why is my pod Burstable?").

use std::path::PathBuf;

use serde::Serialize;

use crate::cli::output::{table, Output};
use crate::cli::plan::load_pods;
use qosd_model::core::model::QosClass;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Pod manifests (files or directories; YAML or JSON; Pods and the pod
    /// templates of Deployments, StatefulSets, DaemonSets, ReplicaSets,
    /// Jobs and CronJobs). Default: the embedded example pods (fixtures/pods).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub(crate) pods: Vec<PathBuf>,
    /// Output format (`wide` adds the uid and the manifest).
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: Output,
}

#[derive(Debug, Serialize)]
struct Row {
    uid: String,
    uid_derived: bool,
    namespace: String,
    name: String,
    qos_class: QosClass,
    reason: String,
    /// `Kind/name` when the pod is a workload's pod template.
    #[serde(skip_serializing_if = "Option::is_none")]
    template_of: Option<String>,
    #[serde(skip)]
    source: String,
}

#[derive(Debug, Serialize)]
struct Doc {
    pods: Vec<Row>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    let Some((pods, _)) = load_pods(&args.pods)? else {
        return Ok(crate::cli::EXIT_BAD_INPUT);
    };
    let rows: Vec<Row> = pods
        .iter()
        .map(|p| {
            let c = qosd_model::core::qos::classify(p);
            let source = match &p.origin {
                qosd_model::core::model::PodOrigin::Manifest(s) => s.clone(),
                _ => String::new(),
            };
            Row {
                uid: p.uid.clone(),
                uid_derived: p.uid_derived,
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                qos_class: c.class,
                reason: c.reason,
                template_of: source.split_once('#').map(|(_, w)| w.to_string()),
                source,
            }
        })
        .collect();
    let templates = rows.iter().filter(|r| r.template_of.is_some()).count();
    let doc = Doc { pods: rows };
    let out = match args.output.structured(&doc)? {
        Some(s) => s,
        None => {
            let wide = args.output == Output::Wide;
            let cells: Vec<Vec<String>> = doc
                .pods
                .iter()
                .map(|r| {
                    let pod = match &r.template_of {
                        Some(w) => format!("{}/{} (template of {w})", r.namespace, r.name),
                        None => format!("{}/{}", r.namespace, r.name),
                    };
                    let mut v = vec![pod, r.qos_class.as_str().to_string()];
                    if wide {
                        v.push(r.uid.clone());
                        v.push(r.source.split('#').next().unwrap_or("").to_string());
                    }
                    v.push(r.reason.clone());
                    v
                })
                .collect();
            let head: &[&str] = if wide {
                &["POD", "QOS", "UID", "MANIFEST", "REASON"]
            } else {
                &["POD", "QOS", "REASON"]
            };
            table(head, &cells)
        }
    };
    if templates > 0 {
        eprintln!(
            "qosd: {templates} pod(s) come from workload pod templates (classified as the pods they would create)"
        );
    }
    crate::cli::output::write_stdout(out)?;
    Ok(0)
}
