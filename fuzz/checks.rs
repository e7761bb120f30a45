//! The checks of the fuzz targets, one function per target: what must
//! hold for any input (never a panic, plus each target's invariants).
//!
//! Shared by the cargo-fuzz targets in `fuzz/fuzz_targets/` (libFuzzer
//! campaigns: `scripts/fuzz`) and by `tests/fuzz_corpus.rs`, which replays
//! every seed in `fuzz/seeds/<target>/` as a normal `cargo test`, so a
//! corpus input that once crashed stays fixed.

// Each fuzz target uses one of these.
#![allow(dead_code)]

use std::collections::HashMap;

/// Kubernetes quantities: never a panic; an accepted value stays within
/// i64 base units and survives a reparse of its own text.
pub fn quantity(data: &[u8]) {
    use qosd_model::core::quantity::Quantity;
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(q) = Quantity::parse(s) {
        assert!(q.nanos().abs() <= i64::MAX as i128 * 1_000_000_000);
        let _ = (q.milli_ceil(), q.value_ceil());
        let again = Quantity::from_nanos(q.nanos());
        assert_eq!(Quantity::parse(again.as_str()).unwrap().nanos(), q.nanos());
    }
}

/// Go durations: never a panic; an accepted value fits Go's int64
/// nanoseconds and its formatted text parses back to itself.
pub fn duration(data: &[u8]) {
    use qosd_model::core::duration::{format_go_duration, parse_go_duration};
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = parse_go_duration(s) {
        assert!(d.as_nanos() <= i64::MAX as u128);
        assert_eq!(parse_go_duration(&format_go_duration(d)).unwrap(), d);
    }
}

/// Eviction thresholds (`memory.available<100Mi,nodefs.available<10%`) and
/// their values for every signal: never a panic.
pub fn threshold(data: &[u8]) {
    use qosd_model::policy::evict::threshold::{
        parse_threshold_flag, parse_threshold_value, Signal,
    };
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(map) = parse_threshold_flag("evictionHard", s) {
        for (k, v) in &map {
            if let Some(sig) = Signal::parse(k) {
                let _ = parse_threshold_value("evictionHard", sig, v);
            }
        }
    }
    for sig in ["memory.available", "nodefs.inodesFree", "pid.available"] {
        let sig = Signal::parse(sig).unwrap();
        let _ = parse_threshold_value("evictionSoft", sig, s);
    }
}

/// The configuration file (KubeletConfiguration field names and formats,
/// so this is also the kubelet-config parser's input): never a panic,
/// never a hang (nesting is capped before parsing).
pub fn config(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = qosd_config::Config::from_yaml_str(s) {
        let _ = c.to_effective_yaml();
    }
}

/// Pod manifests (YAML, JSON, lists, multi-document): never a panic; every
/// accepted pod has a plain uid (it becomes a cgroup path).
pub fn manifest(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for source in ["fuzz.yaml", "fuzz.json"] {
        if let Ok(pods) = qosd_node::manifest::parse_str(s, source) {
            for p in &pods {
                assert!(
                    qosd_model::core::uid::validate_uid(&p.uid).is_ok(),
                    "{:?}",
                    p.uid
                );
                let _ = qosd_model::core::qos::classify(p);
            }
        }
    }
}

/// /proc files: meminfo, cpuinfo, mountinfo (cgroup detection): never a
/// panic on any content.
pub fn procfs(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = qosd_node::sys::procfs::parse_meminfo(s);
    let _ = qosd_node::sys::procfs::count_cpuinfo_processors(s);
    let _ = qosd_node::sys::detect::parse_mountinfo(s);
    let _ = qosd_node::sys::detect::layout_from_mountinfo(
        s,
        std::path::Path::new("/proc/self/mountinfo"),
    );
}

/// cgroup file contents: memory.stat fields, cpusets, cgroup parents (pod
/// uid and class from a path), uids: never a panic; a parsed parent's uid
/// is only trusted after validation.
pub fn cgroup_files(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    for key in ["anon", "file", "inactive_file", "total_inactive_file"] {
        let _ = qosd_node::sys::signals::stat_field(s, key);
    }
    if let Ok(set) = qosd_model::policy::cpu::cpuset::CpuSet::parse(s) {
        let _ = set.to_string();
    }
    if let Some(p) = qosd_node::cri::reconstruct::parse_cgroup_parent(s) {
        let _ = qosd_model::core::uid::validate_uid(&p.uid);
    }
    let _ = qosd_model::core::uid::validate_uid(s);
}

/// The CRI verbose `info` JSON (containerd's sandbox and container
/// status): never a panic; reconstructed CPU limits are never negative.
pub fn cri_info(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let info: HashMap<String, String> = [("info".to_string(), s.to_string())].into();
    let _ = qosd_node::cri::inventory::cgroup_parent_from_info(&info);
    if let Some(r) = qosd_node::cri::inventory::resources_from_info(&info) {
        let c = qosd_node::cri::reconstruct::ContainerSettings::from_cri("c", &r);
        if let Some(m) = c.cpu_limit_millis() {
            assert!(
                m > 0,
                "cpu limit {m} from quota {:?} period {:?}",
                c.cpu_quota,
                c.cpu_period
            );
        }
        let _ = c.cpu_request_millis();
    }
}

/// A target's check.
pub type Check = fn(&[u8]);

/// Every target by name (the directory names under `fuzz/seeds/`).
pub const TARGETS: [(&str, Check); 8] = [
    ("quantity", quantity),
    ("duration", duration),
    ("threshold", threshold),
    ("config", config),
    ("manifest", manifest),
    ("procfs", procfs),
    ("cgroup_files", cgroup_files),
    ("cri_info", cri_info),
];
