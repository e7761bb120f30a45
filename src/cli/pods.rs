//! `qosd pods`: the live pods of the container runtime (CRI) with their QoS
//! classes, how each class was derived, cgroup parents and container settings.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::core::model::ResourceList;
use crate::cri::{
    self, ConnectOptions, Inventory, InventoryOptions, LiveContainer, LivePod, RetryPolicy,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// CRI endpoint of the container runtime (unix socket).
    #[arg(long, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = cri::DEFAULT_ENDPOINT)]
    pub runtime_endpoint: String,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    pub output: Output,
    /// How long to keep retrying while the runtime is down or restarting
    /// (Go-style duration, e.g. 5s, 500ms; 0s: one attempt).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub retry_for: Duration,
    /// Deadline of each CRI call.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// meminfo file giving the node memory capacity (to infer Burstable
    /// memory requests from oom_score_adj).
    #[arg(long, default_value = "/proc/meminfo")]
    pub meminfo: PathBuf,
    #[command(flatten)]
    pub kube: crate::cli::kube::KubeFlags,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let capacity = crate::sys::procfs::meminfo_total(&args.meminfo).ok();
    let opts = ConnectOptions {
        connect_timeout: Duration::from_secs(2).min(args.timeout),
        call_timeout: args.timeout,
        retry: RetryPolicy {
            max_elapsed: args.retry_for,
            ..RetryPolicy::default()
        },
    };
    let mut inv = match cri::inventory_blocking(
        &args.runtime_endpoint,
        opts,
        InventoryOptions {
            memory_capacity_bytes: capacity,
        },
    ) {
        Ok(inv) => inv,
        Err(e @ cri::CriError::BadEndpoint { .. }) => return Err(crate::cli::bad_input(e)),
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!(
                "listing pods of the container runtime at {}",
                args.runtime_endpoint
            )))
        }
    };
    args.kube.merge(&mut inv)?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&to_json(&inv))?),
        Output::Text => print!("{}", to_text(&inv)),
    }
    Ok(0)
}

fn resource_list(l: &ResourceList) -> Value {
    Value::Object(
        l.iter()
            .map(|(k, q)| (k.clone(), Value::String(q.to_string())))
            .collect(),
    )
}

fn container_json(p: &LivePod, c: &LiveContainer) -> Value {
    let mut v = json!({
        "id": c.id,
        "name": c.name,
        "state": c.state,
        "attempt": c.attempt,
        "cpu_shares": c.cpu_shares,
        "cpu_quota": c.cpu_quota,
        "cpu_period": c.cpu_period,
        "memory_limit_bytes": c.memory_limit_bytes,
        "oom_score_adj": c.oom_score_adj,
        "memory_min_bytes": c.memory_min_bytes,
        "resources_origin": c.resources_origin,
        "cpuset_cpus": c.cpuset_cpus,
        "counted": c.counted,
    });
    if c.counted {
        if let Some(m) = p.pod.containers.iter().find(|m| m.name == c.name) {
            v["requests"] = resource_list(&m.resources.requests);
            v["limits"] = resource_list(&m.resources.limits);
        }
    }
    v
}

/// The `qosd pods --output json` document (a stable contract, see docs/cri.md).
pub fn to_json(inv: &Inventory) -> Value {
    let pods: Vec<Value> = inv
        .pods
        .iter()
        .map(|p| {
            json!({
                "uid": p.pod.uid,
                "namespace": p.pod.namespace,
                "name": p.pod.name,
                "sandbox_id": p.sandbox_id,
                "state": p.state.as_str(),
                "qos_class": p.qos_class.as_str(),
                "qos_source": p.qos_source.as_str(),
                "cgroup_parent": p.cgroup_parent.clone().unwrap_or_default(),
                "containers": p.containers.iter().map(|c| container_json(p, c)).collect::<Vec<_>>(),
                "notes": p.notes,
                "warnings": p.warnings,
                "priority": p.pod.priority,
                "priority_class_name": p.pod.priority_class_name,
                "sources": p.sources,
            })
        })
        .collect();
    json!({ "pods": pods, "skipped": inv.skipped })
}

fn or_none(s: String) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        s
    }
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(13)]
}

/// Human-readable listing: one line per pod, then its containers.
pub fn to_text(inv: &Inventory) -> String {
    let mut s = String::new();
    if inv.pods.is_empty() {
        s.push_str("no pod sandboxes\n");
    }
    for p in &inv.pods {
        s.push_str(&format!(
            "{}  uid={}  {}  {} ({})  cgroup-parent={}  sandbox={}\n",
            p.pod.key(),
            p.pod.uid,
            p.state.as_str(),
            p.qos_class,
            p.qos_source,
            p.cgroup_parent.as_deref().unwrap_or("-"),
            short(&p.sandbox_id),
        ));
        for c in &p.containers {
            s.push_str(&format!(
                "  {}  {}  {}{}  cpu_shares={} cpu_quota={} cpu_period={} memory_limit={} oom_score_adj={}{}{}\n",
                c.name,
                short(&c.id),
                c.state,
                if c.counted { "" } else { " (not counted)" },
                opt(c.cpu_shares),
                opt(c.cpu_quota),
                opt(c.cpu_period),
                opt(c.memory_limit_bytes),
                opt(c.oom_score_adj),
                c.memory_min_bytes
                    .map(|m| format!(" memory.min={m}"))
                    .unwrap_or_default(),
                c.cpuset_cpus
                    .as_ref()
                    .map(|m| format!(" cpuset={m}"))
                    .unwrap_or_default(),
            ));
        }
        let by = |want: crate::core::model::ValueSource| {
            p.sources
                .iter()
                .filter(|(_, s)| **s == want)
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(",")
        };
        s.push_str(&format!(
            "  priority={}{}  exact: {}  inferred: {}\n",
            p.pod.priority,
            p.pod
                .priority_class_name
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default(),
            or_none(by(crate::core::model::ValueSource::Exact)),
            or_none(by(crate::core::model::ValueSource::Inferred)),
        ));
        for n in &p.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        for w in &p.warnings {
            s.push_str(&format!("  warning: {w}\n"));
        }
    }
    for k in &inv.skipped {
        s.push_str(&format!(
            "skipped sandbox {}: {}\n",
            short(&k.sandbox_id),
            k.reason
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::model::{Pod, QosClass};
    use crate::cri::inventory::ResourcesOrigin;
    use crate::cri::{QosSource, SandboxState, Skipped};

    fn inv() -> Inventory {
        let c = LiveContainer {
            id: "c0ffee".into(),
            name: "app".into(),
            state: "running".into(),
            attempt: 0,
            cpu_shares: Some(2),
            cpu_quota: None,
            cpu_period: None,
            memory_limit_bytes: None,
            oom_score_adj: Some(1000),
            memory_min_bytes: None,
            resources_origin: ResourcesOrigin::Status,
            cpuset_cpus: Some("2-3".into()),
            counted: true,
        };
        let mut pod = Pod::new("u-1", "ns", "web");
        pod.containers.push(crate::core::model::Container {
            name: "app".into(),
            ..Default::default()
        });
        Inventory {
            pods: vec![LivePod {
                pod,
                sandbox_id: "5a4d".into(),
                state: SandboxState::NotReady,
                qos_class: QosClass::BestEffort,
                qos_source: QosSource::Resources,
                cgroup_parent: None,
                created_at: 0,
                containers: vec![c],
                notes: vec!["n".into()],
                warnings: vec![],
                sources: crate::core::model::provenance_all(
                    crate::core::model::ValueSource::Inferred,
                ),
            }],
            skipped: vec![Skipped {
                sandbox_id: "dead".into(),
                reason: "removed".into(),
            }],
        }
    }

    #[test]
    fn json_shape() {
        let v = to_json(&inv());
        let p = &v["pods"][0];
        assert_eq!(p["state"], "notready");
        assert_eq!(p["qos_class"], "BestEffort");
        assert_eq!(p["qos_source"], "resources");
        assert_eq!(p["cgroup_parent"], "");
        let c = &p["containers"][0];
        assert_eq!(c["cpu_shares"], 2);
        assert!(c["cpu_quota"].is_null());
        assert_eq!(c["resources_origin"], "status");
        assert_eq!(c["cpuset_cpus"], "2-3");
        assert_eq!(c["requests"], serde_json::json!({}));
        assert_eq!(v["skipped"][0]["reason"], "removed");
    }

    #[test]
    fn text_lines() {
        let t = to_text(&inv());
        assert!(
            t.starts_with("ns/web  uid=u-1  notready  BestEffort (resources)  cgroup-parent=-"),
            "{t}"
        );
        assert!(
            t.contains("  app  c0ffee  running  cpu_shares=2 cpu_quota=- "),
            "{t}"
        );
        assert!(t.contains(" oom_score_adj=1000 cpuset=2-3\n"), "{t}");
        assert!(t.contains("  note: n\n"), "{t}");
        assert!(t.contains("skipped sandbox dead: removed"), "{t}");
        assert_eq!(to_text(&Inventory::default()), "no pod sandboxes\n");
    }
}
