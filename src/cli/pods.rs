//! `qosd pods`: the live pods of the container runtime (CRI) with their QoS
//! classes, how each class was derived, cgroup parents and container settings.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use qosd_model::core::model::{Pod, ResourceList, ResourceRequirements};
use qosd_model::policy::enforce::versions::KubeletVersion;
use qosd_node::cri::{
    self, ConnectOptions, Inventory, InventoryOptions, LiveContainer, LivePod, RetryPolicy,
};

use crate::cli::output::{table, Output};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// CRI endpoint of the container runtime (unix socket).
    #[arg(long, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = cri::DEFAULT_ENDPOINT)]
    pub(crate) runtime_endpoint: String,
    /// Output format (`wide`: uids, cgroup parents and every container's settings).
    #[arg(long, short, value_enum, default_value_t = Output::Text)]
    pub(crate) output: Output,
    /// How long to keep retrying while the runtime is down or restarting
    /// (Go duration, e.g. 30s, 500ms; 0s: one attempt). Default 5s, and
    /// none when the socket file does not exist; given, qosd waits for the
    /// socket too (a runtime being started).
    #[arg(long, value_parser = qosd_config::parse_go_duration)]
    pub(crate) retry_for: Option<Duration>,
    /// Deadline of each CRI call (Go duration).
    #[arg(long, default_value = "10s", value_parser = qosd_config::parse_go_duration)]
    pub(crate) timeout: Duration,
    /// meminfo file giving the node memory capacity (to infer Burstable
    /// memory requests from oom_score_adj).
    #[arg(long, default_value = "/proc/meminfo")]
    pub(crate) meminfo: PathBuf,
    #[command(flatten)]
    pub(crate) kube: crate::cli::kube::KubeFlags,
    /// Follow this kubelet version's rules for what it admitted during an
    /// in-place resize (1.33 … 1.36; default 1.36).
    #[arg(long, value_name = "VERSION", value_parser = KubeletVersion::parse, default_value_t = KubeletVersion::NEWEST)]
    pub(crate) kubelet_version: KubeletVersion,
}

/// A runtime whose socket file does not exist is not starting up: say so
/// at once, with where to look, instead of retrying.
pub(crate) fn check_socket_exists(endpoint: &str) -> anyhow::Result<()> {
    let path = cri::client::parse_endpoint(endpoint).map_err(crate::cli::bad_input)?;
    if !path.exists() {
        anyhow::bail!(
            "container runtime not reachable at {endpoint}: socket {} does not exist (is containerd running? set --runtime-endpoint or CONTAINER_RUNTIME_ENDPOINT)",
            path.display()
        );
    }
    Ok(())
}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    // A kubeconfig that cannot be used is a usage error (exit 2), whatever
    // the state of the runtime.
    args.kube.check()?;
    // Asked to wait (`--retry-for`): a missing socket may be a runtime
    // starting up; by default it is a runtime that is not there.
    if args.retry_for.is_none() {
        check_socket_exists(&args.runtime_endpoint)?;
    }
    let capacity = qosd_node::sys::procfs::meminfo_total(&args.meminfo).ok();
    let opts = ConnectOptions {
        connect_timeout: Duration::from_secs(2).min(args.timeout),
        call_timeout: args.timeout,
        retry: RetryPolicy {
            max_elapsed: args.retry_for.unwrap_or(Duration::from_secs(5)),
            ..RetryPolicy::default()
        },
    };
    let rt = crate::app::command_runtime()?;
    let mut inv = match cri::inventory_blocking(
        &rt,
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
    args.kube.merge(&mut inv, args.kubelet_version)?;
    match args.output.structured(&to_json(&inv))? {
        Some(s) => crate::cli::output::write_stdout(s)?,
        None => crate::cli::output::write_stdout(to_text(&inv, args.output == Output::Wide))?,
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

fn requirements_json(r: &ResourceRequirements) -> Value {
    json!({"requests": resource_list(&r.requests), "limits": resource_list(&r.limits)})
}

/// An in-place resize not fully applied: its state and the desired (spec)
/// resources that differ from the admitted ones; `null` when none.
fn resize_json(p: &Pod) -> Value {
    let Some(r) = &p.resize else {
        return Value::Null;
    };
    json!({
        "state": r.state.as_str(),
        "message": r.message,
        "desired": r.desired.iter().map(|(k, v)| (k.clone(), requirements_json(v))).collect::<serde_json::Map<_, _>>(),
        "desired_pod": r.desired_pod.as_ref().map(requirements_json),
    })
}

/// The `qosd pods --output json` document (a stable contract, see docs/cri.md).
pub(crate) fn to_json(inv: &Inventory) -> Value {
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
                "resize": resize_json(&p.pod),
            })
        })
        .collect();
    json!({ "pods": pods, "skipped": inv.skipped })
}

/// `cpu=250m,memory=256Mi`, `-` when empty.
fn list_text(l: &ResourceList) -> String {
    if l.is_empty() {
        return "-".into();
    }
    l.iter()
        .map(|(k, q)| format!("{k}={q}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Wide output: each app and sidecar container's requests and limits as
/// the kubelet admitted them (what qosd plans with), and the desired
/// (spec) ones where an in-place resize has not brought them in line.
fn resources_table(inv: &Inventory) -> String {
    let rows: Vec<Vec<String>> = inv
        .pods
        .iter()
        .flat_map(|p| {
            let pod = &p.pod;
            let sidecars = pod.init_containers.iter().filter(|c| c.restartable);
            pod.containers.iter().chain(sidecars).map(move |c| {
                let desired = pod.resize.as_ref().and_then(|r| r.desired.get(&c.name));
                vec![
                    pod.key(),
                    c.name.clone(),
                    list_text(&c.resources.requests),
                    list_text(&c.resources.limits),
                    desired.map_or_else(|| "same".into(), |d| list_text(&d.requests)),
                    desired.map_or_else(|| "same".into(), |d| list_text(&d.limits)),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n{}",
        table(
            &[
                "POD",
                "CONTAINER",
                "REQUESTS",
                "LIMITS",
                "DESIRED REQUESTS",
                "DESIRED LIMITS",
            ],
            &rows,
        )
    )
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

/// Human-readable listing: a table of pods (wide: with uids, cgroup
/// parents, then a table of every container's settings), notes, skips.
pub(crate) fn to_text(inv: &Inventory, wide: bool) -> String {
    if inv.pods.is_empty() && inv.skipped.is_empty() {
        return "no pod sandboxes\n".to_string();
    }
    let mut s = pods_table(inv, wide);
    if wide {
        s.push_str(&containers_table(inv));
        s.push_str(&resources_table(inv));
    }
    for p in &inv.pods {
        for n in &p.notes {
            s.push_str(&format!("note: {}: {n}\n", p.pod.key()));
        }
        for w in &p.warnings {
            s.push_str(&format!("warning: {}: {w}\n", p.pod.key()));
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

/// One row per pod (wide: uid, cgroup parent, priority, resize state and
/// which values are exact or inferred).
fn pods_table(inv: &Inventory, wide: bool) -> String {
    use qosd_model::core::model::ValueSource;
    let rows: Vec<Vec<String>> = inv
        .pods
        .iter()
        .map(|p| {
            let mut r = vec![
                p.pod.key(),
                p.state.as_str().to_string(),
                p.qos_class.to_string(),
                p.qos_source.to_string(),
                p.containers.len().to_string(),
                short(&p.sandbox_id).to_string(),
            ];
            if wide {
                let by = |want: ValueSource| {
                    or_none(
                        p.sources
                            .iter()
                            .filter(|(_, s)| **s == want)
                            .map(|(k, _)| *k)
                            .collect::<Vec<_>>()
                            .join(","),
                    )
                };
                r.push(p.pod.uid.clone());
                r.push(p.cgroup_parent.as_deref().unwrap_or("-").to_string());
                r.push(match &p.pod.priority_class_name {
                    Some(c) => format!("{} ({c})", p.pod.priority),
                    None => p.pod.priority.to_string(),
                });
                r.push(
                    p.pod
                        .resize
                        .as_ref()
                        .map_or_else(|| "-".to_string(), |r| r.state.to_string()),
                );
                r.push(by(ValueSource::Exact));
                r.push(by(ValueSource::Inferred));
            }
            r
        })
        .collect();
    let head: &[&str] = if wide {
        &[
            "POD",
            "STATE",
            "QOS",
            "QOS SOURCE",
            "CONTAINERS",
            "SANDBOX",
            "UID",
            "CGROUP PARENT",
            "PRIORITY",
            "RESIZE",
            "EXACT",
            "INFERRED",
        ]
    } else {
        &["POD", "STATE", "QOS", "QOS SOURCE", "CONTAINERS", "SANDBOX"]
    };
    if rows.is_empty() {
        return String::new();
    }
    table(head, &rows)
}

/// Wide output: every container with the settings the runtime reports.
fn containers_table(inv: &Inventory) -> String {
    let rows: Vec<Vec<String>> = inv
        .pods
        .iter()
        .flat_map(|p| {
            p.containers.iter().map(move |c| {
                vec![
                    p.pod.key(),
                    format!(
                        "{}{}",
                        c.name,
                        if c.counted { "" } else { " (not counted)" }
                    ),
                    short(&c.id).to_string(),
                    c.state.clone(),
                    opt(c.cpu_shares),
                    opt(c.cpu_quota),
                    opt(c.cpu_period),
                    opt(c.memory_limit_bytes),
                    opt(c.memory_min_bytes),
                    opt(c.oom_score_adj),
                    c.cpuset_cpus.clone().unwrap_or_else(|| "-".into()),
                ]
            })
        })
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    format!(
        "\n{}",
        table(
            &[
                "POD",
                "CONTAINER",
                "ID",
                "STATE",
                "CPU SHARES",
                "CPU QUOTA",
                "CPU PERIOD",
                "MEMORY LIMIT",
                "MEMORY MIN",
                "OOM SCORE ADJ",
                "CPUSET",
            ],
            &rows,
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::{Pod, QosClass};
    use qosd_node::cri::inventory::ResourcesOrigin;
    use qosd_node::cri::{QosSource, SandboxState, Skipped};

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
        pod.containers.push(qosd_model::core::model::Container {
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
                sources: qosd_model::core::model::provenance_all(
                    qosd_model::core::model::ValueSource::Inferred,
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
    fn text_tables() {
        let t = to_text(&inv(), false);
        assert!(
            t.starts_with("POD     STATE     QOS         QOS SOURCE  CONTAINERS  SANDBOX\nns/web  notready  BestEffort  resources   1           5a4d\n"),
            "{t}"
        );
        assert!(t.contains("note: ns/web: n\n"), "{t}");
        assert!(t.contains("skipped sandbox dead: removed"), "{t}");
        let w = to_text(&inv(), true);
        assert!(
            w.contains("UID  CGROUP PARENT  PRIORITY  RESIZE  EXACT  INFERRED\n"),
            "{w}"
        );
        assert!(
            w.contains("  u-1  -              0         -       -      ephemeralStorage,"),
            "{w}"
        );
        assert!(
            w.contains("REQUESTS  LIMITS  DESIRED REQUESTS  DESIRED LIMITS\n"),
            "{w}"
        );
        assert!(
            w.contains("ns/web  app        -         -       same              same\n"),
            "{w}"
        );
        assert!(
            w.contains("ns/web  app        c0ffee  running  2           -"),
            "{w}"
        );
        assert!(w.contains("1000           2-3\n"), "{w}");
        assert_eq!(to_text(&Inventory::default(), false), "no pod sandboxes\n");
    }

    /// A resize the kubelet refused: wide output and JSON show the state,
    /// the admitted values (planned) and the desired ones.
    #[test]
    fn resize_shown_desired_vs_admitted() {
        use qosd_model::core::model::{Resize, ResizeState};
        use qosd_model::core::quantity::Quantity;
        let q = |s: &str| Quantity::parse(s).unwrap();
        let mut i = inv();
        let pod = &mut i.pods[0].pod;
        pod.containers[0]
            .resources
            .requests
            .insert("cpu".into(), q("1600m"));
        let mut desired = ResourceRequirements::default();
        desired.requests.insert("cpu".into(), q("100"));
        pod.resize = Some(Resize {
            state: ResizeState::Infeasible,
            message: Some("Node didn't have enough capacity".into()),
            desired: [("app".to_string(), desired)].into(),
            desired_pod: None,
        });
        let w = to_text(&i, true);
        assert!(w.contains("PRIORITY  RESIZE      EXACT  INFERRED"), "{w}");
        assert!(
            w.contains("  0         Infeasible  -      ephemeralStorage,"),
            "{w}"
        );
        assert!(
            w.contains("CONTAINER  REQUESTS   LIMITS  DESIRED REQUESTS  DESIRED LIMITS\n"),
            "{w}"
        );
        assert!(
            w.contains("ns/web  app        cpu=1600m  -       cpu=100           -\n"),
            "{w}"
        );
        let v = to_json(&i);
        let r = &v["pods"][0]["resize"];
        assert_eq!(r["state"], "Infeasible");
        assert_eq!(r["desired"]["app"]["requests"]["cpu"], "100");
        assert_eq!(r["message"], "Node didn't have enough capacity");
        assert!(to_json(&inv())["pods"][0]["resize"].is_null());
    }
}
