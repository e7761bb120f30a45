//! Every family of docs/operations.md's metrics reference is in a fresh
//! daemon's first `/metrics`: counters and histograms whose label sets are
//! known start at 0. Gauges of a measured value appear once it is measured
//! (a 0 there would be a false reading): the signal and threshold gauges
//! after the first eviction pass, the pressure threshold gauges with
//! pressure thresholds, `qosd_kube_pods` with an API server.
//!
//! The daemon runs in dry-run on manifests over a private, empty cgroupfs
//! directory: no root, no runtime.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use crate::support::{wait_for, Daemon};

/// Families set only once their value is measured.
const MEASURED: &[&str] = &[
    "qosd_signal_available_",
    "qosd_signal_capacity_",
    "qosd_eviction_threshold_",
    // per pressure threshold, once measured (none configured here)
    "qosd_signal_pressure_observed_",
    "qosd_signal_pressure_threshold_",
    "qosd_signal_pressure_detector",
    "qosd_kube_pods",
];

fn documented() -> BTreeSet<String> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"))
            .unwrap();
    let table = doc
        .split("## Metrics reference")
        .nth(1)
        .expect("a metrics reference section");
    table
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|f| f.starts_with("qosd_") || f.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

fn scraped(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(|f| {
            // OpenMetrics names counters without `_total`.
            match l_type(text, f) {
                Some("counter") if !f.ends_with("_total") => format!("{f}_total"),
                _ => f.to_string(),
            }
        })
        .collect()
}

fn l_type<'a>(text: &'a str, family: &str) -> Option<&'a str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .find(|l| l.split_whitespace().next() == Some(family))
        .and_then(|l| l.split_whitespace().nth(1))
}

#[test]
fn every_documented_family_is_in_the_first_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let args = support::fake_node_run_args(dir.path(), &["--dry-run"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start(&args);
    let mut first = None;
    wait_for("the first scrape", Duration::from_secs(30), || {
        first = d
            .get("/metrics")
            .filter(|r| r.status == 200)
            .map(|r| r.body);
        first.is_some()
    });
    let first = scraped(&first.unwrap());
    d.assert_running();
    d.stop();
    let docs = documented();
    assert!(docs.len() >= 40, "{docs:?}");
    let missing: Vec<&String> = docs
        .iter()
        .filter(|f| !first.contains(*f))
        .filter(|f| !MEASURED.iter().any(|m| f.starts_with(m)))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not in the first scrape: {missing:?}"
    );
    let undocumented: Vec<&String> = first
        .iter()
        .filter(|f| f.starts_with("qosd_") && !docs.contains(*f))
        .collect();
    assert!(
        undocumented.is_empty(),
        "scraped but not documented: {undocumented:?}"
    );
}
