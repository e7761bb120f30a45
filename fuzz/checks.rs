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

/// Eviction thresholds through the parsers the daemon uses: an input with
/// `<` is read as `--eviction-hard` reads it and loaded as `qosd run`
/// loads flags (the same thresholds as the file's, or an error in both);
/// each `signal<value` statement of the input (or, without `<`, the whole
/// input for a few signals) as an `evictionHard`, `evictionSoft` and `evictionMinimumReclaim`
/// entry, parsed by [`qosd_config::ThresholdSetting::parse`] and through a
/// whole config file, then turned into the eviction policy
/// ([`qosd_config::Config::eviction`]). Never a panic; a value taken is a
/// positive quantity or a percentage in (0, 1), and the effective config
/// loads again to the same thresholds.
pub fn threshold(data: &[u8]) {
    use qosd_config::{Config, Signal, ThresholdSetting, ThresholdValue};
    use std::collections::BTreeMap;
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    if s.contains('<') {
        // As `--eviction-hard` reads it, then loaded as `qosd run` and
        // `qosd config check` load it: the same as the file's entries.
        let Ok(flag) = qosd_config::parse_langle_map(s) else {
            return;
        };
        let overrides = qosd_config::Overrides {
            eviction_hard: Some(flag.clone()),
            ..Default::default()
        };
        let from_flag = Config::load_with(None, &overrides);
        let body: Vec<String> = flag
            .iter()
            .map(|(k, v)| format!("{}: {}", json_string(k), json_string(v)))
            .collect();
        let from_file =
            Config::from_yaml_str(&format!("{{\"evictionHard\": {{{}}}}}", body.join(", ")));
        match (&from_flag, &from_file) {
            (Ok(a), Ok(b)) => assert_eq!(a.eviction_hard, b.eviction_hard, "{s:?}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{s:?}: flag {from_flag:?}, file {from_file:?}"),
        }
        entries = flag;
    } else {
        for sig in ["memory.available", "nodefs.inodesFree", "pid.available"] {
            entries.insert(sig.to_string(), s.to_string());
        }
    }
    entries.retain(|k, _| Signal::parse(k).is_some());
    // Thresholds: a positive quantity or a fraction in (0, 1); a minimum
    // reclaim: a positive quantity or a positive fraction.
    let sane = |v: &ThresholdValue, reclaim: bool| match *v {
        ThresholdValue::Quantity(q) => q > 0,
        ThresholdValue::Percentage(p) => p.is_finite() && p > 0.0 && (reclaim || p < 1.0),
        // never from a kubelet setting
        ThresholdValue::Stall { .. } => false,
    };
    // The pressure grammar on the same input: a share in (0, 1] of a
    // window the kernel's triggers accept, printed back as it parses.
    for sig in [Signal::MemorySome, Signal::MemoryFull] {
        if let Ok(t) = ThresholdSetting::parse_pressure("evictionPressureHard", sig, s) {
            let Some(ThresholdValue::Stall { share, window }) = t.value else {
                panic!("pressure value {s:?}: {:?}", t.value);
            };
            assert!(share > 0.0 && share <= 1.0, "{s:?}: {share}");
            assert!(
                (std::time::Duration::from_millis(500)..=std::time::Duration::from_secs(10))
                    .contains(&window),
                "{s:?}: {window:?}"
            );
            assert_eq!(t.as_written(), s);
        }
    }
    for (k, v) in &entries {
        let sig = Signal::parse(k).expect("kept known signals only");
        for setting in ["eviction-hard", "eviction-soft", "eviction-minimum-reclaim"] {
            if let Ok(t) = ThresholdSetting::parse(setting, sig, v) {
                let reclaim = setting == "eviction-minimum-reclaim";
                assert!(
                    t.value.as_ref().is_none_or(|x| sane(x, reclaim)),
                    "{setting} {k}={v:?}: {:?}",
                    t.value
                );
                assert_eq!(t.as_written(), v);
            }
        }
    }
    // The same entries as a config file (JSON is YAML).
    let map = |value: &dyn Fn(&str) -> String| {
        let body: Vec<String> = entries
            .iter()
            .map(|(k, v)| format!("{}: {}", json_string(k), json_string(&value(v))))
            .collect();
        format!("{{{}}}", body.join(", "))
    };
    let yaml = format!(
        "{{\"evictionHard\": {hard}, \"evictionSoft\": {hard}, \"evictionMinimumReclaim\": {hard}, \"evictionSoftGracePeriod\": {grace}}}",
        hard = map(&|v| v.to_string()),
        grace = map(&|_| "1m".to_string()),
    );
    let Ok(cfg) = Config::from_yaml_str(&yaml) else {
        return;
    };
    let ev = cfg.eviction();
    for t in &ev.thresholds {
        assert!(sane(&t.value, false), "{t:?}");
        assert!(
            t.min_reclaim.as_ref().is_none_or(|r| sane(r, true)),
            "{t:?}"
        );
    }
    let again = Config::from_yaml_str(&cfg.to_effective_yaml()).expect("effective config loads");
    assert_eq!(again.eviction_hard, cfg.eviction_hard);
    assert_eq!(again.eviction_minimum_reclaim, cfg.eviction_minimum_reclaim);
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
