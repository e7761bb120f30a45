//! `qosd classify`: each pod's QoS class and why ("why is my pod Burstable?").

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;

use crate::cli::plan::{load_pods, OutputFormat};
use crate::core::model::QosClass;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Pod manifests (files or directories; YAML or JSON). Default: the
    /// embedded example pods (fixtures/pods).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub pods: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub output: OutputFormat,
}

#[derive(Debug, Serialize)]
struct Row {
    uid: String,
    uid_derived: bool,
    namespace: String,
    name: String,
    qos_class: QosClass,
    reason: String,
}

#[derive(Debug, Serialize)]
struct Doc {
    pods: Vec<Row>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let (pods, _) = load_pods(&args.pods)?;
    let rows: Vec<Row> = pods
        .iter()
        .map(|p| {
            let c = crate::core::qos::classify(p);
            Row {
                uid: p.uid.clone(),
                uid_derived: p.uid_derived,
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                qos_class: c.class,
                reason: c.reason,
            }
        })
        .collect();
    let out = match args.output {
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(&Doc { pods: rows })?;
            s.push('\n');
            s
        }
        OutputFormat::Text => {
            let keys: Vec<String> = rows
                .iter()
                .map(|r| format!("{}/{}", r.namespace, r.name))
                .collect();
            let w = keys
                .iter()
                .map(String::len)
                .max()
                .unwrap_or(0)
                .max("POD".len());
            let mut s = format!("{:<w$}  {:<10}  REASON\n", "POD", "QOS");
            for (k, r) in keys.iter().zip(&rows) {
                s.push_str(&format!(
                    "{k:<w$}  {:<10}  {}\n",
                    r.qos_class.as_str(),
                    r.reason
                ));
            }
            s
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes())?;
    stdout.flush()?;
    Ok(0)
}
