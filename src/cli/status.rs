//! `qosd status`: what qosd sees on this node.
//!
//! First asks a running daemon (`GET /status` on `--address`, default the
//! config's `metricsAddress`). When none answers, it computes what it can
//! live and says so: pods by QoS class from the container runtime (CRI),
//! node signals read now against the configured eviction thresholds, and
//! the node conditions those thresholds imply right now (no history, so no
//! pressure transition period and no evictions).
//!
//! Exit 0 when it could report (daemon, or runtime answered); 1 when neither
//! the daemon nor the runtime answered (what could be read is still
//! printed); 2 for a bad config file.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::bad_input;
use crate::cli::config_check::load_or_bad_input;
use crate::cli::output::Output;
use crate::telemetry::status::{ConditionStatus, PodCounts, SignalStatus, StatusDoc};
use qosd_config::{Config, Overrides};
use qosd_model::core::model::CgroupVersion;
use qosd_model::policy::evict::manager::{Manager, ManagerOptions};
use qosd_model::policy::evict::threshold::{EvictionConfig, Signal};
use qosd_node::sys::signals::SignalSources;

#[derive(Debug, clap::Args)]
#[command(
    long_about = "Show what qosd sees: node signals against the eviction thresholds, node \
conditions, pods by QoS class, the last reconcile and recent evictions.\n\n\
Asks the running daemon at --address (GET /status). When no daemon answers, computes live \
from the node and the container runtime and says so (no reconcile or eviction history then).\n\n\
Exit codes: 0 reported; 1 neither the daemon nor the runtime answered; 2 bad config."
)]
pub(crate) struct Args {
    /// Address of the running daemon's HTTP endpoint (default: metricsAddress of --config,
    /// i.e. 127.0.0.1:9847).
    #[arg(long, value_name = "IP:PORT")]
    pub(crate) address: Option<SocketAddr>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub(crate) output: Output,
    /// Config file (thresholds, cgroup layout and runtime for the live view);
    /// default /etc/qosd/config.yaml when it exists.
    #[arg(long, env = "QOSD_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) kubelet: qosd_config::KubeletSource,
    /// CRI endpoint for the live view (overrides runtimeEndpoint of --config).
    #[arg(
        long,
        alias = "container-runtime-endpoint",
        env = "CONTAINER_RUNTIME_ENDPOINT",
        value_name = "ENDPOINT"
    )]
    pub(crate) runtime_endpoint: Option<String>,
    /// How long to wait for the daemon and the runtime.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = qosd_config::parse_go_duration)]
    pub(crate) timeout: Duration,
}

/// Where a status report came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The running daemon's `/status`.
    Daemon,
    /// Computed by this command (no daemon answered).
    Live,
}

impl Source {
    fn as_str(self) -> &'static str {
        match self {
            Source::Daemon => "daemon",
            Source::Live => "live",
        }
    }
}

/// A status report: the document plus where it came from and notes.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) source: Source,
    pub(crate) address: SocketAddr,
    pub(crate) doc: StatusDoc,
    pub(crate) notes: Vec<String>,
}

impl Report {
    /// JSON: the status document with `source`, `address` and `notes` added.
    pub(crate) fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(&self.doc).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("source".into(), self.source.as_str().into());
            m.insert("address".into(), self.address.to_string().into());
            m.insert("notes".into(), self.notes.clone().into());
        }
        v
    }

    /// Text: a header naming the source, the table, then the notes.
    pub(crate) fn to_text(&self, now_ms: u64) -> String {
        let mut o = match self.source {
            Source::Daemon => format!("source: daemon at {}\n", self.address),
            Source::Live => format!(
                "source: live (no qosd daemon answered at {}; computed now from the node and the runtime)\n",
                self.address
            ),
        };
        o.push_str(&crate::cli::status_table::render(&self.doc, now_ms));
        for n in &self.notes {
            o.push_str(&format!("note: {}\n", crate::cli::output::text_safe(n)));
        }
        o
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<i32> {
    let overrides = Overrides {
        runtime_endpoint: args.runtime_endpoint.clone(),
        kubelet: args.kubelet.clone(),
        ..Overrides::default()
    };
    // A bad config is bad input even when a daemon answers: say so now.
    let path = args.config.clone().or_else(|| {
        let p = std::path::Path::new(qosd_config::DEFAULT_CONFIG_PATH);
        p.is_file().then(|| p.to_path_buf())
    });
    let cfg = load_or_bad_input(path.as_deref(), &overrides)?;
    let address = args.address.unwrap_or(cfg.metrics_address);
    let rt = crate::app::command_runtime()?;
    let (report, code) = match crate::telemetry::client::fetch_status(&rt, address, args.timeout) {
        Ok(doc) => (
            Report {
                source: Source::Daemon,
                address,
                doc,
                notes: Vec::new(),
            },
            0,
        ),
        Err(e) => {
            tracing::debug!(error = %e, "no daemon answered");
            let (mut report, runtime_ok) = live(&rt, &cfg, address, args.timeout);
            report.notes.insert(0, format!("no daemon: {e}"));
            (report, if runtime_ok { 0 } else { 1 })
        }
    };
    match args
        .output
        .structured(&report.to_json())
        .map_err(bad_input)?
    {
        Some(s) => print_out(&s)?,
        None => print_out(&report.to_text(crate::telemetry::status::now_ms()))?,
    }
    if code != 0 {
        eprintln!(
            "qosd: error: neither a qosd daemon at {address} nor the container runtime at {} answered",
            cfg.runtime_endpoint
        );
    }
    Ok(code)
}

/// Write to stdout (see [`crate::cli::output::write_stdout`]).
fn print_out(text: &str) -> anyhow::Result<()> {
    crate::cli::output::write_stdout(text)
}

/// Compute a status report now, without a daemon. Returns the report and
/// whether the container runtime answered.
pub(crate) fn live(
    rt: &tokio::runtime::Runtime,
    cfg: &Config,
    address: SocketAddr,
    timeout: Duration,
) -> (Report, bool) {
    let mut notes = Vec::new();
    let mut doc = StatusDoc::new();
    doc.not_ready_reason = Some("no qosd daemon running (live view)".into());
    doc.cgroup_enforcement = cfg.cgroup_enforcement.as_str().to_string();

    // Pods by class, from the runtime.
    let opts = qosd_node::cri::ConnectOptions {
        connect_timeout: timeout,
        call_timeout: timeout.max(Duration::from_secs(5)),
        retry: qosd_node::cri::RetryPolicy {
            max_elapsed: timeout,
            ..Default::default()
        },
    };
    let inv_opts = qosd_node::cri::InventoryOptions {
        memory_capacity_bytes: qosd_node::sys::procfs::detect_memory_bytes(Path::new("/proc")).ok(),
    };
    let runtime_ok =
        match qosd_node::cri::inventory_blocking(rt, &cfg.runtime_endpoint, opts, inv_opts) {
            Ok(inv) => {
                doc.pods = PodCounts::of(&inv.ready_pods());
                if !inv.skipped.is_empty() {
                    notes.push(format!(
                        "{} sandboxes skipped (qosd pods lists them)",
                        inv.skipped.len()
                    ));
                }
                true
            }
            Err(e) => {
                notes.push(format!(
                    "runtime at {} did not answer: {e}; pod counts unknown",
                    cfg.runtime_endpoint
                ));
                doc.pods_unknown = true;
                false
            }
        };

    // Signals against thresholds.
    let version = match cfg.cgroup_version.forced() {
        Some(v) => Some(v),
        None => match qosd_node::sys::detect::detect_version(&cfg.cgroupfs) {
            Ok(v) => Some(v),
            Err(e) => {
                notes.push(format!(
                    "cannot detect the cgroup version at {}: {e}",
                    cfg.cgroupfs.display()
                ));
                None
            }
        },
    };
    doc.set_setup(
        cfg.mode == qosd_config::Mode::DryRun,
        version,
        cfg.cgroup_driver,
    );
    if let Some(v) = version {
        let ev = crate::runtime::eviction_service::eviction_config(cfg);
        let sources = signal_sources(cfg, v);
        let (signals, conditions, mut n) = evaluate(&ev, &sources);
        doc.signals = signals;
        doc.conditions = conditions;
        notes.append(&mut n);
    }
    notes.push(
        "conditions are the thresholds met right now (no pressure transition period); \
         evictions and reconciles are known only to a running daemon"
            .into(),
    );
    (
        Report {
            source: Source::Live,
            address,
            doc,
            notes,
        },
        runtime_ok,
    )
}

/// Where the signals are read from for this config.
fn signal_sources(cfg: &Config, version: CgroupVersion) -> SignalSources {
    let layout = qosd_model::policy::enforce::naming::CgroupLayout::new(version, cfg.cgroup_driver)
        .with_cgroupfs(cfg.cgroupfs.clone())
        .with_cgroup_root(cfg.cgroup_root.clone());
    crate::runtime::eviction_service::signal_sources(
        cfg,
        &layout,
        std::path::Path::new("/proc"),
        None,
    )
}

/// Read every signal that has a threshold (and `memory.available` always)
/// and evaluate the thresholds the way the daemon does: one pass of the
/// model's eviction manager ([`Manager::synchronize`]) on a fresh manager
/// (no history: no pressure transition period, no grace period met) with
/// no pods (so it chooses no victim). The document's part comes from the
/// one status builder ([`crate::telemetry::status::eviction_status`]).
/// Returns signals, the conditions the met thresholds imply, and notes for
/// signals that could not be read.
pub(crate) fn evaluate(
    ev: &EvictionConfig,
    sources: &SignalSources,
) -> (Vec<SignalStatus>, Vec<ConditionStatus>, Vec<String>) {
    let mut notes = Vec::new();
    let now = Instant::now();
    let mut wanted: Vec<Signal> = ev.thresholds.iter().map(|t| t.signal).collect();
    wanted.push(Signal::MemoryAvailable);
    wanted.sort();
    wanted.dedup();
    let mut observed = BTreeMap::new();
    for sig in wanted {
        let (obs, errs) = sources.observe([sig], now);
        for e in errs {
            notes.push(format!("{sig}: {e}"));
        }
        if let Some(o) = obs.get(&sig) {
            observed.insert(sig, *o);
        }
    }
    let decision = Manager::new(ev.clone(), ManagerOptions::default()).synchronize(
        now,
        &observed,
        Err("the live view lists no pods for eviction".into()),
    );
    let (signals, conditions) = crate::telemetry::status::eviction_status(
        &decision.thresholds,
        observed.get(&Signal::MemoryAvailable).copied(),
        Some(&decision.conditions),
    );
    (signals, conditions, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sources(dir: &Path, mem_avail_kib: i64) -> SignalSources {
        let meminfo = dir.join("meminfo");
        std::fs::write(
            &meminfo,
            format!("MemTotal: 1048576 kB\nMemFree: 1 kB\nMemAvailable: {mem_avail_kib} kB\n"),
        )
        .unwrap();
        let loadavg = dir.join("loadavg");
        std::fs::write(&loadavg, "0.00 0.01 0.05 1/500 123\n").unwrap();
        let pid_max = dir.join("pid_max");
        std::fs::write(&pid_max, "4096\n").unwrap();
        let mut s = SignalSources::host(CgroupVersion::V1);
        s.meminfo = meminfo;
        s.loadavg = loadavg;
        s.pid_max = pid_max;
        s.memory_source = qosd_model::policy::evict::MemorySource::Meminfo;
        s.nodefs = Some(dir.to_path_buf());
        s.kubepods = None;
        s
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A percentage of a signal not observed (here the allocatable memory
    /// without a kubepods cgroup) has no resolved value: null, never 0.
    #[test]
    fn an_unresolved_percentage_threshold_has_no_value() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path(), 500 * 1024);
        let hard = map(&[
            ("allocatableMemory.available", "10%"),
            ("memory.available", "100Mi"),
        ]);
        let ev = EvictionConfig::from_parts(
            Some(&hard),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            0,
            Duration::from_secs(300),
        )
        .unwrap();
        let (signals, _, _) = evaluate(&ev, &s);
        let alloc = signals
            .iter()
            .find(|s| s.signal == "allocatableMemory.available")
            .expect("listed");
        assert_eq!(alloc.observed, None);
        assert_eq!(alloc.thresholds[0].value, None, "{alloc:?}");
        let json = serde_json::to_value(&alloc.thresholds[0]).unwrap();
        assert!(json["value"].is_null(), "{json}");
    }

    #[test]
    fn evaluate_marks_met_thresholds_and_conditions() {
        let d = tempfile::tempdir().unwrap();
        // 1 GiB total, 50 MiB available: below 100Mi hard, below 300Mi soft.
        let s = sources(d.path(), 50 * 1024);
        let hard = map(&[("memory.available", "100Mi"), ("pid.available", "10%")]);
        let soft = map(&[("memory.available", "300Mi")]);
        let mut grace = BTreeMap::new();
        grace.insert("memory.available".to_string(), Duration::from_secs(90));
        let reclaim = map(&[("memory.available", "50Mi")]);
        let ev = EvictionConfig::from_parts(
            Some(&hard),
            &soft,
            &grace,
            &reclaim,
            0,
            Duration::from_secs(300),
        )
        .unwrap();
        let (signals, conds, notes) = evaluate(&ev, &s);
        assert!(notes.is_empty(), "{notes:?}");
        let names: Vec<&str> = signals.iter().map(|s| s.signal.as_str()).collect();
        assert_eq!(names, ["memory.available", "pid.available"]);
        let mem = &signals[0];
        assert_eq!(mem.observed, Some(50 << 20));
        assert_eq!(mem.capacity, Some(1 << 30));
        assert_eq!(mem.thresholds.len(), 2);
        let h = &mem.thresholds[0];
        assert_eq!((h.kind.as_str(), h.threshold.as_str()), ("hard", "100Mi"));
        assert_eq!(h.value, Some(100 << 20));
        assert!(h.met);
        assert_eq!(h.min_reclaim.as_deref(), Some("50Mi"));
        let so = &mem.thresholds[1];
        assert_eq!(so.kind, "soft");
        assert!(so.met);
        assert_eq!(so.grace_period.as_deref(), Some("1m30s"));
        // pid: 4096 - 500 = 3596 available, threshold 409: not met.
        let pid = &signals[1];
        assert_eq!(pid.observed, Some(3596));
        assert_eq!(pid.thresholds[0].value, Some(409));
        assert!(!pid.thresholds[0].met);
        let active: Vec<(&str, bool)> = conds
            .iter()
            .map(|c| (c.condition.as_str(), c.active))
            .collect();
        assert_eq!(
            active,
            [
                ("MemoryPressure", true),
                ("DiskPressure", false),
                ("PIDPressure", false)
            ]
        );
        assert!(conds[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("memory.available<100Mi"));
    }

    #[test]
    fn evaluate_reports_unreadable_signals_without_failing() {
        let d = tempfile::tempdir().unwrap();
        let mut s = sources(d.path(), 900 * 1024);
        s.meminfo = d.path().join("missing");
        let hard = map(&[("memory.available", "100Mi")]);
        let ev = EvictionConfig::from_parts(
            Some(&hard),
            &BTreeMap::new(),
            &BTreeMap::new(),
            &BTreeMap::new(),
            0,
            Duration::from_secs(300),
        )
        .unwrap();
        let (signals, conds, notes) = evaluate(&ev, &s);
        assert_eq!(signals[0].observed, None);
        assert!(!signals[0].thresholds[0].met);
        // The threshold in the kubelet's quantity form, whatever was read.
        assert_eq!(signals[0].thresholds[0].threshold, "100Mi");
        assert!(conds.iter().all(|c| !c.active));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].contains("missing"), "{notes:?}");
    }

    #[test]
    fn report_text_and_json_name_the_source() {
        let mut doc = StatusDoc::new();
        doc.pods = PodCounts {
            guaranteed: 1,
            burstable: 2,
            best_effort: 0,
        };
        let r = Report {
            source: Source::Live,
            address: "127.0.0.1:9".parse().unwrap(),
            doc,
            notes: vec!["hello".into()],
        };
        let t = r.to_text(0);
        assert!(t.starts_with("source: live (no qosd daemon answered at 127.0.0.1:9"));
        assert!(t.contains("Guaranteed 1  Burstable 2  BestEffort 0"), "{t}");
        assert!(t.ends_with("note: hello\n"), "{t}");
        let j = r.to_json();
        assert_eq!(j["source"], "live");
        assert_eq!(j["address"], "127.0.0.1:9");
        assert_eq!(j["notes"][0], "hello");
        assert_eq!(j["pods"]["burstable"], 2);
        // Still a StatusDoc for readers that ignore the extras.
        let back: StatusDoc = serde_json::from_value(j).unwrap();
        assert_eq!(back.pods.guaranteed, 1);
    }

    #[test]
    fn live_without_runtime_reports_and_fails() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config::from_yaml_str("{}").unwrap();
        cfg.runtime_endpoint = format!("unix://{}", d.path().join("none.sock").display());
        cfg.cgroup_version = qosd_config::CgroupVersionSetting::V1;
        let rt = crate::app::command_runtime().unwrap();
        let (r, ok) = live(
            &rt,
            &cfg,
            "127.0.0.1:1".parse().unwrap(),
            Duration::from_millis(200),
        );
        assert!(!ok);
        assert_eq!(r.source, Source::Live);
        assert!(
            r.notes.iter().any(|n| n.contains("did not answer")),
            "{:?}",
            r.notes
        );
        assert_eq!(r.doc.cgroup_version, "v1");
        assert_eq!(r.doc.conditions.len(), 3);
    }
}
