//! The text rendering of a status document: what `qosd status` prints
//! without `--output json` (the daemon serves the document itself, as JSON,
//! on `/status`).

use std::fmt::Write as _;

use crate::cli::output::text_safe;
use crate::telemetry::status::{
    AuditStatus, EvictionRecord, KubeStatus, PodUsage, SignalStatus, StatusDoc, ThresholdStatus,
};

/// The document as a human-readable table: the setup and health, the
/// signals against their thresholds, conditions, pods, the last reconcile,
/// measured pod usage and recent evictions. Times are shown relative to
/// `now_ms`.
pub(crate) fn render(doc: &StatusDoc, now_ms: u64) -> String {
    let mut o = String::new();
    write_setup(&mut o, doc, now_ms);
    let _ = writeln!(o);
    write_signals(&mut o, &doc.signals);
    let _ = writeln!(o);
    write_summary(&mut o, doc, now_ms);
    if !doc.pod_usage.is_empty() {
        write_pod_usage(&mut o, &doc.pod_usage, doc.pod_usage_at_ms, now_ms);
    }
    write_evictions(&mut o, &doc.last_evictions, now_ms);
    o
}

/// The header: version, mode, cgroup setup, health, configuration and the
/// side states (degraded modes, runtime events, the Kubernetes API, audit).
fn write_setup(o: &mut String, doc: &StatusDoc, now_ms: u64) {
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        o,
        "qosd {}  mode {}  cgroup {}/{}  alive {}  ready {}",
        or_dash(&doc.version),
        or_dash(&doc.mode),
        or_dash(&doc.cgroup_version),
        or_dash(&doc.cgroup_driver),
        yes(doc.alive),
        yes(doc.ready),
    );
    if let Some(why) = &doc.not_ready_reason {
        let _ = writeln!(o, "not ready: {}", text_safe(why));
    }
    if doc.config_generation > 0 {
        let _ = writeln!(
            o,
            "config generation {} loaded {} ago{}",
            doc.config_generation,
            ago(now_ms, doc.config_loaded_at_ms),
            doc.last_reload
                .as_ref()
                .map(|r| format!("; last reload: {r}"))
                .unwrap_or_default()
        );
    }
    for d in &doc.degraded {
        let _ = writeln!(o, "degraded: {}", text_safe(d));
    }
    if let Some(e) = &doc.runtime_events {
        let _ = writeln!(o, "runtime events: {e}");
    }
    if let Some(k) = &doc.kubernetes {
        write_kubernetes(o, k);
    }
    if let Some(a) = &doc.audit {
        write_audit(o, a);
    }
    if let Some(s) = &doc.oom_score_adj {
        write_oom(o, s);
    }
}

fn write_oom(o: &mut String, s: &crate::telemetry::status::OomScoreStatus) {
    let _ = writeln!(
        o,
        "oom_score_adj ({}): {} processes, {} differ, {} written since start, {} containers refused",
        or_dash(&s.mode),
        s.processes,
        s.differing,
        s.written_total,
        s.refused_containers
    );
    for v in &s.values {
        let _ = writeln!(
            o,
            "  {}/{} {} pid {}: found {}, planned {}",
            text_safe(&v.namespace),
            text_safe(&v.pod),
            text_safe(&v.container),
            v.pid,
            v.found,
            v.planned
        );
    }
    for r in &s.refused {
        let _ = writeln!(
            o,
            "  refused {}/{} {}: planned {}, found {} ({})",
            text_safe(&r.namespace),
            text_safe(&r.pod),
            text_safe(&r.container),
            r.planned,
            r.found,
            text_safe(&r.error)
        );
    }
}

fn write_kubernetes(o: &mut String, k: &KubeStatus) {
    let _ = writeln!(
        o,
        "kubernetes API {} ({}): {}  pods exact {} inferred {}",
        or_dash(&k.server),
        or_dash(&k.node_name),
        or_dash(&k.state),
        k.pods_exact,
        k.pods_inferred
    );
}

fn write_audit(o: &mut String, a: &AuditStatus) {
    let _ = writeln!(
        o,
        "cgroups: audit (nothing written): {} planned values differ, {} changes reported",
        a.drifting, a.changes_total
    );
    for d in &a.values {
        let _ = writeln!(
            o,
            "  {}: found {}, planned {}",
            d.file,
            d.found.as_deref().unwrap_or("(missing)"),
            d.planned
        );
    }
}

/// One row per signal: observed, capacity and its thresholds.
fn write_signals(o: &mut String, signals: &[SignalStatus]) {
    let _ = writeln!(
        o,
        "{:<30} {:>12} {:>12}  THRESHOLDS",
        "SIGNAL", "OBSERVED", "CAPACITY"
    );
    for sig in signals {
        let fmt = |v: Option<i64>| v.map_or("-".to_string(), |v| signal_value(&sig.signal, v));
        let th: Vec<String> = sig
            .thresholds
            .iter()
            .map(|t| threshold_cell(sig, t))
            .collect();
        let _ = writeln!(
            o,
            "{:<30} {:>12} {:>12}  {}",
            sig.signal,
            fmt(sig.observed),
            fmt(sig.capacity),
            if th.is_empty() {
                "-".to_string()
            } else {
                th.join(", ")
            }
        );
        write_pressure_line(o, sig);
    }
}

/// A pressure signal's second line: the stalled share of its window, the
/// kernel's averages and how the signal is watched.
fn write_pressure_line(o: &mut String, sig: &SignalStatus) {
    let Some(p) = &sig.pressure else {
        return;
    };
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}%"));
    let _ = writeln!(
        o,
        "  {} stalled {} of {}; kernel averages 10s {} 60s {} 300s {}; {}",
        sig.signal,
        pct(p.stall_percent),
        or_dash(&p.window),
        pct(p.avg10),
        pct(p.avg60),
        pct(p.avg300),
        p.detail
    );
}

/// A threshold as configured, with its resolved value when that reads
/// differently (`hard <10% (1.6Gi)`), its grace period and whether it is met.
fn threshold_cell(sig: &SignalStatus, t: &ThresholdStatus) -> String {
    let signal = sig.signal.as_str();
    // `threshold` may be the whole statement (`signal<value`).
    let configured = t.threshold.rsplit('<').next().unwrap_or("");
    let mut x = match t.value {
        // stalled time over a window: met at or above it
        _ if sig.pressure.is_some() => format!("{} >={configured}", t.kind),
        None => format!("{} <{configured}", t.kind),
        Some(v) => {
            let resolved = signal_value(signal, v);
            if configured == resolved || configured == v.to_string() {
                format!("{} <{resolved}", t.kind)
            } else {
                format!("{} <{configured} ({resolved})", t.kind)
            }
        }
    };
    if let Some(g) = &t.grace_period {
        x.push_str(&format!(" grace {g}"));
    }
    if t.met {
        x.push_str(" MET");
    }
    x
}

/// Conditions, pods by QoS class and the last reconcile.
fn write_summary(o: &mut String, doc: &StatusDoc, now_ms: u64) {
    let conds: Vec<String> = doc
        .conditions
        .iter()
        .map(|c| {
            format!(
                "{}={}",
                c.condition,
                if c.active { "True" } else { "False" }
            )
        })
        .collect();
    let _ = writeln!(
        o,
        "conditions: {}",
        if conds.is_empty() {
            "-".to_string()
        } else {
            conds.join("  ")
        }
    );
    if doc.pods_unknown {
        let _ = writeln!(o, "pods: unknown");
    } else {
        let _ = writeln!(
            o,
            "pods: Guaranteed {}  Burstable {}  BestEffort {}  (total {})",
            doc.pods.guaranteed,
            doc.pods.burstable,
            doc.pods.best_effort,
            doc.pods.total()
        );
    }
    match &doc.last_reconcile {
        Some(r) => {
            let _ = writeln!(
                o,
                "last reconcile: {} ago, {:.1} ms, {} writes, {} errors, {} pods",
                ago(now_ms, r.at_ms),
                r.duration_ms,
                r.writes,
                r.errors,
                r.pods
            );
        }
        None => {
            let _ = writeln!(o, "last reconcile: none yet");
        }
    }
}

/// Per-pod usage as the eviction manager last measured it.
fn write_pod_usage(o: &mut String, usage: &[PodUsage], at_ms: Option<u64>, now_ms: u64) {
    let when = at_ms
        .map(|t| format!(", {} ago", ago(now_ms, t)))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "\npod usage (as last measured by the eviction manager{when}):"
    );
    let _ = writeln!(
        o,
        "  {:<40} {:<11} {:>12} {:>12} {:>10} {:>9}",
        "POD", "QOS", "MEMORY", "STORAGE", "INODES", "PROCESSES"
    );
    let b = |v: Option<u64>| {
        v.map(|x| signal_value("memory.available", x as i64))
            .unwrap_or_else(|| "-".into())
    };
    let n = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
    for p in usage {
        let _ = writeln!(
            o,
            "  {:<40} {:<11} {:>12} {:>12} {:>10} {:>9}",
            text_safe(&format!("{}/{}", p.namespace, p.name)),
            p.qos_class,
            b(p.memory_working_set_bytes),
            b(p.ephemeral_storage_bytes),
            n(p.inodes),
            n(p.processes)
        );
    }
}

/// Recent evictions, newest first.
fn write_evictions(o: &mut String, evictions: &[EvictionRecord], now_ms: u64) {
    if evictions.is_empty() {
        let _ = writeln!(o, "evictions: none");
        return;
    }
    let _ = writeln!(o, "\nrecent evictions (newest first):");
    let _ = writeln!(
        o,
        "  {:<10} {:<40} {:<11} {:<28} {:>12} {:>12}  BACKEND",
        "WHEN", "POD", "QOS", "SIGNAL", "OBSERVED", "THRESHOLD"
    );
    for e in evictions {
        let _ = writeln!(
            o,
            "  {:<10} {:<40} {:<11} {:<28} {:>12} {:>12}  {}",
            ago(now_ms, e.at_ms),
            text_safe(&format!("{}/{}", e.namespace, e.name)),
            e.qos_class,
            format!("{} ({})", e.signal, or_dash(&e.threshold_kind)),
            signal_value(&e.signal, e.observed),
            signal_value(&e.signal, e.threshold),
            or_dash(&e.backend)
        );
    }
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// Bytes in binary units for byte signals; plain counts for inodes/PIDs
/// ([`Signal::is_bytes`](qosd_model::policy::evict::threshold::Signal::is_bytes)).
fn signal_value(signal: &str, v: i64) -> String {
    if qosd_model::policy::evict::threshold::Signal::parse(signal).is_some_and(|s| !s.is_bytes()) {
        return v.to_string();
    }
    if qosd_model::policy::evict::threshold::Signal::parse_pressure(signal).is_some() {
        // µs of stall, or of the window
        return qosd_model::core::duration::format_go_duration(std::time::Duration::from_micros(
            v.max(0) as u64,
        ));
    }
    const UNITS: [&str; 6] = ["", "Ki", "Mi", "Gi", "Ti", "Pi"];
    let mut x = v as f64;
    let mut u = 0;
    while x.abs() >= 1024.0 && u < UNITS.len() - 1 {
        x /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v}")
    } else {
        format!("{x:.1}{}", UNITS[u])
    }
}

fn ago(now_ms: u64, at_ms: u64) -> String {
    if at_ms == 0 {
        return "-".into();
    }
    let d = now_ms.saturating_sub(at_ms);
    match d {
        0..=999 => format!("{d}ms"),
        1000..=119_999 => format!("{}s", d / 1000),
        120_000..=7_199_999 => format!("{}m", d / 60_000),
        _ => format!("{}h", d / 3_600_000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::status::{ConditionStatus, PodCounts};

    #[test]
    fn status_table_shows_signals_pods_and_evictions() {
        let mut d = StatusDoc::new();
        d.mode = "enforce".into();
        d.signals.push(SignalStatus {
            signal: "memory.available".into(),
            observed: Some(50 << 20),
            capacity: Some(8 << 30),
            thresholds: vec![ThresholdStatus {
                kind: "hard".into(),
                threshold: "100Mi".into(),
                value: Some(100 << 20),
                met: true,
                ..Default::default()
            }],
            pressure: None,
        });
        d.signals.push(SignalStatus {
            signal: "nodefs.inodesFree".into(),
            observed: Some(12345),
            ..Default::default()
        });
        d.conditions.push(ConditionStatus {
            condition: "MemoryPressure".into(),
            active: true,
            ..Default::default()
        });
        d.pods = PodCounts {
            guaranteed: 1,
            burstable: 2,
            best_effort: 3,
        };
        d.push_eviction(EvictionRecord {
            at_ms: 1_000,
            namespace: "default".into(),
            name: "hog".into(),
            qos_class: "BestEffort".into(),
            signal: "memory.available".into(),
            threshold_kind: "hard".into(),
            observed: 50 << 20,
            threshold: 100 << 20,
            backend: "kill".into(),
            ..Default::default()
        });
        let t = render(&d, 6_000);
        for piece in [
            "mode enforce",
            "memory.available",
            "50.0Mi",
            "8.0Gi",
            "hard <100Mi (100.0Mi) MET",
            "12345",
            "MemoryPressure=True",
            "(total 6)",
            "default/hog",
            "5s",
            "last reconcile: none yet",
        ] {
            assert!(t.contains(piece), "{piece:?} missing from\n{t}");
        }
    }

    /// A pressure signal in `qosd status`: stalled time of its window, the
    /// threshold as a share, how it is watched (unavailable: the reason).
    #[test]
    fn status_table_shows_pressure_signals() {
        use qosd_node::sys::pressure::{Mode, PressureStatus};
        let mut d = StatusDoc::new();
        d.signals.push(SignalStatus {
            signal: "memory.full".into(),
            observed: Some(300_000),
            capacity: Some(2_000_000),
            thresholds: vec![ThresholdStatus {
                kind: "hard".into(),
                threshold: "10%/2s".into(),
                value: Some(200_000),
                met: true,
                ..Default::default()
            }],
            pressure: None,
        });
        crate::telemetry::status::add_pressure(
            &mut d.signals,
            &[
                PressureStatus {
                    signal: qosd_model::policy::evict::threshold::Signal::MemoryFull,
                    mode: Mode::Trigger { privileged: true },
                    window: std::time::Duration::from_secs(2),
                    reading: None,
                    error: None,
                },
                PressureStatus {
                    signal: qosd_model::policy::evict::threshold::Signal::MemorySome,
                    mode: Mode::Unavailable("no /proc/pressure".into()),
                    window: std::time::Duration::from_secs(2),
                    reading: None,
                    error: None,
                },
            ],
        );
        let p = d.signals[0].pressure.as_ref().unwrap();
        assert_eq!((p.mode.as_str(), p.stall_percent), ("trigger", Some(15.0)));
        assert_eq!(d.signals[1].signal, "memory.some", "never silently absent");
        let t = render(&d, 6_000);
        for piece in [
            "memory.full",
            "300ms",
            "hard >=10%/2s MET",
            "memory.full stalled 15.0% of 2s",
            "trigger (kernel checks every tenth of the window)",
            "memory.some stalled - of 2s",
            "unavailable: no /proc/pressure",
        ] {
            assert!(t.contains(piece), "{piece:?} missing from\n{t}");
        }
    }
}
