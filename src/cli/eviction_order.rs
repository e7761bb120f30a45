//! `qosd eviction-order`: the order in which qosd would evict pods now for
//! a signal, with the reason for each position ("what if" with a usage file).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::cli::bad_input;
use qosd_model::policy::evict::rank::{self, Candidate, PodStats, Ranking};
use qosd_model::policy::evict::threshold::{Signal, SignalResource};

use crate::cli::config_check::ConfigFlags;
use crate::cli::output::Output;

#[derive(Debug, clap::Args)]
#[command(
    after_help = "With --cri the pods, their cgroups and their usage are the daemon's: the same \
listing, layout (--config and the flags of `qosd run`) and cgroup readers. \
Usage file format: {\"pods\": {\"<uid>\": {\"memory_working_set_bytes\": N, \
\"ephemeral_storage_bytes\": N, \"processes\": N}}} (\"inodes\" too); it overrides live usage. \
Pods without stats rank first, like the kubelet's."
)]
pub(crate) struct Args {
    /// Eviction signal to rank for (memory.available, allocatableMemory.available,
    /// nodefs.available, nodefs.inodesFree, imagefs.*, containerfs.*, pid.available,
    /// or qosd's pressure signals memory.some, memory.full: the pods that stall
    /// first, then the memory order; with --cri on cgroup v2 each pod's stall
    /// is measured over --stall-sample).
    #[arg(long, default_value = "memory.available")]
    pub(crate) signal: String,
    /// With --cri and a pressure signal: how long each pod's memory stall
    /// (its cgroup's memory.pressure) is measured.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_sample)]
    pub(crate) stall_sample: std::time::Duration,
    /// Pod manifests (files or directories) instead of the live runtime.
    #[arg(long, num_args = 1.., value_name = "PATH", conflicts_with = "cri")]
    pub(crate) pods: Vec<PathBuf>,
    /// JSON file with per-pod usage (see below).
    #[arg(long, value_name = "FILE")]
    pub(crate) usage: Option<PathBuf>,
    /// Rank the live pods of the container runtime, with usage read from their cgroups.
    #[arg(long)]
    pub(crate) cri: bool,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    /// Where sysfs is (hugepage sizes of the layout).
    #[arg(long, value_name = "DIR", default_value = "/sys")]
    pub(crate) sysfs: PathBuf,
    /// Where /proc is.
    #[arg(long, value_name = "DIR", default_value = "/proc", hide = true)]
    pub(crate) proc_root: PathBuf,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: Output,
}

fn parse_sample(s: &str) -> Result<std::time::Duration, String> {
    let d = qosd_model::core::duration::parse_go_duration(s)?;
    if d < std::time::Duration::from_millis(100) || d > std::time::Duration::from_secs(60) {
        return Err(format!("{s}: between 100ms and 1m"));
    }
    Ok(d)
}

/// The usage file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageFile {
    pub(crate) pods: BTreeMap<String, PodStats>,
}

/// One row of the JSON output (contract: ../shared/contracts, kind eviction-order).
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct OrderEntry {
    pub(crate) rank: usize,
    pub(crate) uid: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) qos_class: String,
    pub(crate) priority: i32,
    /// What the ranking compares, in `usage_unit` (bytes; inodes for
    /// `*.inodesFree`; processes for `pid.available`); null when unknown.
    pub(crate) usage: Option<u64>,
    /// Bytes, never a count: the ranked usage for memory and disk signals;
    /// for the count signals the bytes of the same resource (local storage
    /// for inodes, the memory working set for processes). 0 when unknown
    /// (`usage_bytes_known`).
    pub(crate) usage_bytes: u64,
    pub(crate) usage_bytes_known: bool,
    /// Whether `usage` is known.
    pub(crate) usage_known: bool,
    pub(crate) request_bytes: i64,
    pub(crate) reason: String,
    /// The pod's measured usage (null: not measured).
    pub(crate) memory_working_set_bytes: Option<u64>,
    /// Writable layers + logs + local volumes.
    pub(crate) ephemeral_storage_bytes: Option<u64>,
    pub(crate) inodes: Option<u64>,
    pub(crate) processes: Option<u64>,
    /// The share of the sample the pod stalled on memory, ppm (pressure
    /// signals; null: not measured).
    pub(crate) memory_stall_ppm: Option<u32>,
}

#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct NeverEntry {
    pub(crate) uid: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) reason: String,
}

#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct OrderDoc {
    pub(crate) signal: String,
    pub(crate) usage_unit: &'static str,
    pub(crate) order: Vec<OrderEntry>,
    pub(crate) never_evicted: Vec<NeverEntry>,
}

/// Build the output document from a ranking (pure).
pub(crate) fn document(signal: Signal, r: &Ranking) -> OrderDoc {
    OrderDoc {
        signal: signal.to_string(),
        usage_unit: match signal.resource() {
            SignalResource::Memory | SignalResource::MemoryStall | SignalResource::Disk => "bytes",
            SignalResource::Inodes => "inodes",
            SignalResource::Pids => "processes",
        },
        order: r
            .order
            .iter()
            .map(|x| (x, rank::usage_bytes(signal, x.usage, x.candidate.stats)))
            .map(|(x, bytes)| OrderEntry {
                rank: x.rank,
                uid: x.candidate.uid.clone(),
                namespace: x.candidate.namespace.clone(),
                name: x.candidate.name.clone(),
                qos_class: x.candidate.qos.to_string(),
                priority: x.candidate.priority,
                usage: x.usage,
                usage_bytes: bytes.unwrap_or(0),
                usage_bytes_known: bytes.is_some(),
                usage_known: x.usage.is_some(),
                request_bytes: x.request,
                reason: x.reason.clone(),
                memory_working_set_bytes: x
                    .candidate
                    .stats
                    .and_then(|s| s.memory_working_set_bytes),
                ephemeral_storage_bytes: x.candidate.stats.and_then(|s| s.ephemeral_storage_bytes),
                inodes: x.candidate.stats.and_then(|s| s.inodes),
                processes: x.candidate.stats.and_then(|s| s.processes),
                memory_stall_ppm: x.candidate.stats.and_then(|s| s.memory_stall_ppm),
            })
            .collect(),
        never_evicted: r
            .never_evicted
            .iter()
            .map(|(c, why)| NeverEntry {
                uid: c.uid.clone(),
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                reason: why.clone(),
            })
            .collect(),
    }
}

/// Render the text form.
pub(crate) fn render_text(doc: &OrderDoc) -> String {
    let mut out = format!(
        "Eviction order for {} (first is evicted first):\n",
        doc.signal
    );
    let bytes = doc.usage_unit == "bytes";
    let show = |v: i128| {
        if bytes {
            rank::fmt_bytes(v)
        } else {
            v.to_string()
        }
    };
    let opt_bytes = |v: Option<u64>| {
        v.map(|b| rank::fmt_bytes(b.into()))
            .unwrap_or_else(|| "-".into())
    };
    let opt_n = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    let rows: Vec<[String; 10]> = doc
        .order
        .iter()
        .map(|e| {
            [
                e.rank.to_string(),
                crate::cli::output::text_safe(&format!("{}/{}", e.namespace, e.name)).into_owned(),
                e.qos_class.clone(),
                e.priority.to_string(),
                e.usage.map_or_else(|| "-".into(), |u| show(u.into())),
                show(e.request_bytes.into()),
                opt_bytes(e.ephemeral_storage_bytes),
                opt_n(e.inodes),
                opt_n(e.processes),
                crate::cli::output::text_safe(&e.reason).into_owned(),
            ]
        })
        .collect();
    let head = [
        "RANK", "POD", "QOS", "PRIORITY", "USAGE", "REQUEST", "STORAGE", "INODES", "PROCS",
        "REASON",
    ];
    let mut w = head.map(str::len);
    for r in &rows {
        for (i, c) in r.iter().enumerate().take(9) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: [&str; 10]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i < 9 {
                s.push_str(&format!("{:<width$}  ", c, width = w[i]));
            } else {
                s.push_str(c);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    if rows.is_empty() {
        out.push_str("  (no evictable pod)\n");
    } else {
        out.push_str(&line(head));
        for r in &rows {
            out.push_str(&line(std::array::from_fn(|i| r[i].as_str())));
        }
    }
    if !doc.never_evicted.is_empty() {
        out.push_str("Never evicted:\n");
        for n in &doc.never_evicted {
            out.push_str(&format!(
                "  {}/{} ({}): {}\n",
                n.namespace, n.name, n.uid, n.reason
            ));
        }
    }
    out
}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    let signal = Signal::parse(&args.signal)
        .or_else(|| Signal::parse_pressure(&args.signal))
        .ok_or_else(|| {
            bad_input(format!(
                "unknown eviction signal {:?} (known: {}, and qosd's {})",
                args.signal,
                Signal::ALL.map(Signal::as_str).join(", "),
                Signal::PRESSURE.map(Signal::as_str).join(", ")
            ))
        })?;
    if args.pods.is_empty() && !args.cri {
        return Err(bad_input(
            "give --pods PATH... (manifests) or --cri (live pods)",
        ));
    }
    let usage = match &args.usage {
        None => UsageFile::default(),
        Some(p) => {
            let text = qosd_node::sys::input::read_text(p)
                .with_context(|| format!("cannot read usage file {}", p.display()))
                .map_err(|e| bad_input(format!("{e:#}")))?;
            serde_json::from_str::<UsageFile>(&text)
                .map_err(|e| bad_input(format!("usage file {}: {e}", p.display())))?
        }
    };
    let candidates: Vec<Candidate> = if args.cri {
        // The daemon's listing, layout and cgroup readers.
        let cfg = args.config.load()?;
        let plan = crate::app::plan_config(&cfg, &args.proc_root, &args.sysfs)?;
        let mut listing = crate::app::live_listing(&cfg, &args.proc_root)?;
        crate::cli::kube::merge_listing(&cfg, &mut listing)?;
        crate::app::check_parents(&plan, &listing).map_err(bad_input)?;
        let mut c = crate::app::live_candidates(&plan, &listing);
        add_disk_usage(&cfg, &mut c);
        if signal.is_pressure() {
            add_stall(&mut c, args.stall_sample);
        }
        for x in &mut c {
            if let Some(st) = usage.pods.get(&x.uid) {
                x.stats = Some(*st);
            }
        }
        warn_unknown(&usage, &c);
        c
    } else {
        let pods = qosd_node::manifest::load_paths(&args.pods).map_err(bad_input)?;
        if pods.is_empty() {
            eprintln!("qosd: warning: no pod in the --pods paths");
            return Ok(crate::cli::EXIT_BAD_INPUT);
        }
        let c: Vec<Candidate> = pods
            .iter()
            .map(|p| Candidate::from_pod(p, usage.pods.get(&p.uid).copied()))
            .collect();
        warn_unknown(&usage, &c);
        c
    };
    let ranking = rank::rank(signal, &candidates);
    let doc = document(signal, &ranking);
    match args.output.structured(&doc)? {
        Some(s) => crate::cli::output::write_stdout(s)?,
        None => crate::cli::output::write_stdout(render_text(&doc))?,
    }
    Ok(0)
}

fn warn_unknown(usage: &UsageFile, c: &[Candidate]) {
    for uid in usage.pods.keys() {
        if !c.iter().any(|p| &p.uid == uid) {
            eprintln!("qosd: warning: usage file names pod uid {uid}, which is not among the pods");
        }
    }
}

/// Each live pod's memory stall over `sample` (its cgroup's
/// `memory.pressure` `some` total, read twice), as the daemon measures it
/// between passes; unknown where the file cannot be read (cgroup v1).
fn add_stall(candidates: &mut [Candidate], sample: std::time::Duration) {
    use qosd_node::sys::pressure::cgroup_memory_stall_us;
    let first: Vec<Option<(std::time::Instant, u64)>> = candidates
        .iter()
        .map(|c| {
            let dir = c.cgroup_dirs.first()?;
            Some((std::time::Instant::now(), cgroup_memory_stall_us(dir).ok()?))
        })
        .collect();
    if first.iter().all(Option::is_none) {
        return;
    }
    std::thread::sleep(sample);
    for (c, before) in candidates.iter_mut().zip(first) {
        let (Some((at, before)), Some(dir)) = (before, c.cgroup_dirs.first()) else {
            continue;
        };
        let Ok(now) = cgroup_memory_stall_us(dir) else {
            continue;
        };
        let us = at.elapsed().as_micros().max(1) as f64;
        let ppm = (now.saturating_sub(before) as f64 / us * 1e6).clamp(0.0, 1e6) as u32;
        let mut st = c.stats.unwrap_or_default();
        st.memory_stall_ppm = Some(ppm);
        c.stats = Some(st);
    }
}

/// Measure the live pods as the daemon does (best effort: what cannot be
/// read stays unknown).
/// Disk usage of live candidates measured like the daemon does: writable
/// layers (CRI `ListContainerStats`), logs and local volumes under the
/// kubelet's directories (`rootDir`, `podLogsDir`), added to their stats.
fn add_disk_usage(cfg: &qosd_config::Config, candidates: &mut [Candidate]) {
    let Ok(rt) = crate::app::command_runtime() else {
        return;
    };
    let layers = rt
        .block_on(async {
            let c = qosd_node::cri::CriClient::connect(
                &cfg.runtime_endpoint,
                qosd_node::cri::ConnectOptions::default(),
            )
            .await?;
            c.list_container_stats().await
        })
        .ok()
        .map(|stats| qosd_node::evict::stopper::writable_layers_by_pod(&stats));
    for c in candidates {
        // A pod the runtime reported no stats for has no layers.
        let pod_layers = layers
            .as_ref()
            .map(|all| all.get(&c.uid).cloned().unwrap_or_default());
        if let Ok(local) = qosd_node::sys::signals::pod_local_storage(
            &cfg.root_dir,
            &cfg.pod_logs_dir,
            &c.namespace,
            &c.name,
            &c.uid,
        ) {
            let (_, parts) = crate::runtime::eviction::storage_of(&local, pod_layers.as_ref());
            c.stats = Some(c.stats.unwrap_or_default().with_storage(&parts));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qosd_model::core::model::QosClass;

    fn cand(uid: &str, qos: QosClass, prio: i32, req: i64, usage: Option<u64>) -> Candidate {
        Candidate {
            uid: uid.into(),
            namespace: "default".into(),
            name: format!("pod-{uid}"),
            qos,
            priority: prio,
            static_or_mirror: false,
            memory_request_bytes: req,
            ephemeral_storage_request_bytes: 0,
            termination_grace_period_seconds: None,
            sandbox_id: None,
            cgroup_dirs: vec![],
            storage_limits: Default::default(),
            storage_detail: None,
            stats: usage.map(|u| PodStats {
                memory_working_set_bytes: Some(u),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn document_shape_and_text() {
        let mut crit = cand("c", QosClass::Guaranteed, 2_000_000_000, 10, Some(5));
        crit.name = "kube-proxy".into();
        let cands = vec![
            cand("g", QosClass::Guaranteed, 0, 1 << 30, Some(1 << 29)),
            cand("be", QosClass::BestEffort, 0, 0, Some(300 << 20)),
            cand("n", QosClass::Burstable, 0, 100, None),
            crit,
        ];
        let doc = document(
            Signal::MemoryAvailable,
            &rank::rank(Signal::MemoryAvailable, &cands),
        );
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["signal"], "memory.available");
        let uids: Vec<&str> = v["order"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["uid"].as_str().unwrap())
            .collect();
        assert_eq!(uids, ["n", "be", "g"]);
        assert_eq!(v["order"][0]["usage_known"], false);
        assert_eq!(v["order"][1]["usage_bytes"], 300u64 << 20);
        assert_eq!(v["order"][1]["qos_class"], "BestEffort");
        assert_eq!(v["never_evicted"][0]["uid"], "c");
        for k in [
            "uid",
            "namespace",
            "name",
            "qos_class",
            "priority",
            "usage_bytes",
            "request_bytes",
            "reason",
        ] {
            assert!(v["order"][2].get(k).is_some(), "{k}");
        }
        let text = render_text(&doc);
        assert!(text.contains("RANK  POD"), "{text}");
        assert!(text.contains("default/pod-be"));
        assert!(text.contains("300.0MiB"));
        assert!(text.contains("Never evicted:\n  default/kube-proxy (c): priority 2000000000"));
    }

    /// `usage_bytes` holds bytes for every signal: the process count the
    /// pid ranking compares is `usage` (in `usage_unit`), never bytes.
    #[test]
    fn a_count_signal_reports_its_count_as_usage_and_bytes_as_bytes() {
        let mut a = cand("a", QosClass::BestEffort, 0, 0, Some(64 << 20));
        a.stats = a.stats.map(|s| PodStats {
            processes: Some(7),
            ..s
        });
        let mut b = cand("b", QosClass::BestEffort, 0, 0, None);
        b.stats = Some(PodStats {
            processes: Some(3),
            ..Default::default()
        });
        let doc = document(
            Signal::PidAvailable,
            &rank::rank(Signal::PidAvailable, &[a, b]),
        );
        let v = serde_json::to_value(&doc).unwrap();
        assert_eq!(v["usage_unit"], "processes");
        assert_eq!(v["order"][0]["uid"], "a");
        assert_eq!(v["order"][0]["usage"], 7);
        assert_eq!(v["order"][0]["usage_bytes"], 64u64 << 20);
        assert_eq!(v["order"][0]["usage_bytes_known"], true);
        // Processes known, memory not: the bytes are unknown, not 3.
        assert_eq!(v["order"][1]["usage"], 3);
        assert_eq!(v["order"][1]["usage_bytes_known"], false);
        assert_eq!(v["order"][1]["usage_bytes"], 0);
        let text = render_text(&doc);
        assert!(text.contains("  7  "), "{text}");
    }

    #[test]
    fn usage_file_parse() {
        let u: UsageFile = serde_json::from_str(
            r#"{"pods": {"a": {"memory_working_set_bytes": 5, "processes": 2}, "b": {}}}"#,
        )
        .unwrap();
        assert_eq!(u.pods["a"].memory_working_set_bytes, Some(5));
        assert_eq!(u.pods["a"].processes, Some(2));
        assert_eq!(u.pods["b"], PodStats::default());
        assert!(serde_json::from_str::<UsageFile>(r#"{"pod": {}}"#).is_err());
        assert!(serde_json::from_str::<UsageFile>(
            r#"{"pods": {"a": {"memory_working_set_bytes": -1}}}"#
        )
        .is_err());
    }
}
