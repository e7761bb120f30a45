//! Config file parsing: every field, every error, overrides, the example
//! config, and the `qosd config check` CLI (exit 2 naming field and value).

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use qosd_config::{
    CgroupVersionSetting, Config, ConfigError, CpuWeightFormula, EvictionBackend, LogFormat, Mode,
    Overrides, Percent,
};
use qosd_model::core::model::{CgroupDriver, CgroupVersion};

/// An eviction signal by name (the typed maps' key).
fn sig(name: &str) -> qosd_config::Signal {
    qosd_config::Signal::parse(name).unwrap()
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config/qosd.yaml")
}

fn errors(yaml: &str) -> ConfigError {
    match Config::from_yaml_str(yaml) {
        Ok(c) => panic!("{yaml:?} accepted: {c:?}"),
        Err(e) => e,
    }
}

const EVERY_FIELD: &str = r#"
evictionHard:
  memory.available: "500Mi"
  nodefs.available: "12.5%"
  pid.available: 1000
evictionSoft:
  memory.available: "1Gi"
  allocatableMemory.available: "10%"
evictionSoftGracePeriod:
  memory.available: "1m30s"
  allocatableMemory.available: "30s"
evictionMinimumReclaim:
  memory.available: "256Mi"
  nodefs.inodesFree: "1%"
evictionMaxPodGracePeriod: 45
evictionPressureTransitionPeriod: "2m"
mergeDefaultEvictionSettings: false
cgroupDriver: systemd
cgroupRoot: /qosd-test-1
systemReserved:
  cpu: 1
  memory: "2Gi"
  ephemeral-storage: "10Gi"
  pid: "1000"
  hugepages-2Mi: "0"
kubeReserved:
  cpu: "250m"
  memory: "1Gi"
qosReserved:
  memory: "50%"
cpuCFSQuota: false
cpuCFSQuotaPeriod: "50ms"
memoryThrottlingFactor: 0.8
cgroupfs: /tmp/fake-cgroup
cgroupVersion: v2
runtimeEndpoint: "unix:///run/crio/crio.sock"
mode: dry-run
reconcileInterval: "30s"
relistInterval: "250ms"
metricsAddress: "[::1]:19847"
rootDir: /mnt/kubelet
imagefsPath: /var/lib/containerd
memoryAvailableSource: meminfo
cpuWeightFormula: runc
memoryQoS: true
nodeCPU: "8"
nodeMemory: "32Gi"
logFormat: json
evictionBackend: cri
"#;

#[test]
fn every_field_is_read() {
    let c = Config::from_yaml_str(EVERY_FIELD).unwrap();
    assert_eq!(
        c.eviction_hard.len(),
        3,
        "no defaults mixed into a given map"
    );
    assert_eq!(
        c.eviction_hard[&sig("memory.available")].as_written(),
        "500Mi"
    );
    assert_eq!(
        c.eviction_hard[&sig("nodefs.available")].as_written(),
        "12.5%"
    );
    assert_eq!(c.eviction_hard[&sig("pid.available")].as_written(), "1000");
    assert_eq!(
        c.eviction_soft[&sig("allocatableMemory.available")].as_written(),
        "10%"
    );
    assert_eq!(
        c.eviction_soft_grace_period[&sig("memory.available")],
        Duration::from_secs(90)
    );
    assert_eq!(
        c.eviction_minimum_reclaim[&sig("nodefs.inodesFree")].as_written(),
        "1%"
    );
    assert_eq!(c.eviction_max_pod_grace_period, 45);
    assert_eq!(
        c.eviction_pressure_transition_period,
        Duration::from_secs(120)
    );
    assert!(!c.merge_default_eviction_settings);
    assert_eq!(c.cgroup_driver, CgroupDriver::Systemd);
    assert_eq!(c.cgroup_root, "/qosd-test-1");
    assert_eq!(c.system_reserved["cpu"].milli_ceil(), 1000);
    assert_eq!(c.system_reserved["memory"].value_ceil(), 2 << 30);
    assert_eq!(c.system_reserved["pid"].value_ceil(), 1000);
    assert!(c.system_reserved.contains_key("hugepages-2Mi"));
    assert_eq!(c.kube_reserved["cpu"].milli_ceil(), 250);
    assert_eq!(c.qos_reserved["memory"], Percent(50));
    assert_eq!(c.qos_reserved_memory(), Some(50));
    assert!(!c.cpu_cfs_quota);
    assert_eq!(c.cpu_cfs_quota_period, Duration::from_millis(50));
    assert_eq!(c.memory_throttling_factor, 0.8);
    assert_eq!(c.cgroupfs, PathBuf::from("/tmp/fake-cgroup"));
    assert_eq!(c.cgroup_version, CgroupVersionSetting::V2);
    assert_eq!(c.cgroup_version.forced(), Some(CgroupVersion::V2));
    assert_eq!(c.runtime_endpoint, "unix:///run/crio/crio.sock");
    assert_eq!(
        c.runtime_socket_path(),
        PathBuf::from("/run/crio/crio.sock")
    );
    assert_eq!(c.mode, Mode::DryRun);
    assert_eq!(c.reconcile_interval, Duration::from_secs(30));
    assert_eq!(c.relist_interval, Duration::from_millis(250));
    assert_eq!(c.metrics_address.to_string(), "[::1]:19847");
    assert_eq!(c.root_dir, PathBuf::from("/mnt/kubelet"));
    assert_eq!(c.imagefs_path, Some(PathBuf::from("/var/lib/containerd")));
    assert_eq!(
        c.memory_available_source,
        qosd_model::policy::evict::MemorySource::Meminfo
    );
    assert_eq!(c.cpu_weight_formula, CpuWeightFormula::Runc);
    assert!(c.memory_qos);
    assert_eq!(c.node_cpu.as_ref().unwrap().milli_ceil(), 8000);
    assert_eq!(c.node_memory.as_ref().unwrap().value_ceil(), 32 << 30);
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.eviction_backend, EvictionBackend::Cri);
    // dry-run mode forces the dry-run evictor whatever the backend.
    assert_eq!(c.effective_eviction_backend(), EvictionBackend::DryRun);

    // The effective YAML reloads to the same config.
    let y = c.to_effective_yaml();
    assert_eq!(Config::from_yaml_str(&y).unwrap(), c, "{y}");
}

#[test]
fn kubelet_eviction_defaults_and_merge() {
    let c = Config::from_yaml_str("mode: enforce\n").unwrap();
    assert_eq!(c.eviction_hard.len(), 5);
    // A partial map replaces the defaults, like the kubelet...
    let c = Config::from_yaml_str("evictionHard: {memory.available: 1Gi}\n").unwrap();
    assert_eq!(c.eviction_hard.len(), 1);
    // ...unless mergeDefaultEvictionSettings is on.
    let c = Config::from_yaml_str(
        "evictionHard: {memory.available: 1Gi}\nmergeDefaultEvictionSettings: true\n",
    )
    .unwrap();
    assert_eq!(c.eviction_hard.len(), 5);
    assert_eq!(
        c.eviction_hard[&sig("memory.available")].as_written(),
        "1Gi"
    );
    assert_eq!(
        c.eviction_hard[&sig("imagefs.available")].as_written(),
        "15%"
    );
    // An explicitly empty map means no hard thresholds at all.
    let c = Config::from_yaml_str("evictionHard: {}\n").unwrap();
    assert!(c.eviction_hard.is_empty());
}

#[test]
fn empty_and_comment_only_files_are_defaults() {
    for text in ["", "\n\n", "# nothing\n  # here\n", "---\n", "~\n"] {
        assert_eq!(
            Config::from_yaml_str(text).unwrap(),
            Config::default(),
            "{text:?}"
        );
    }
}

#[test]
fn example_config_is_valid_and_documents_every_field() {
    let c = Config::load(&example()).unwrap();
    // The README's advice: start in dry-run.
    assert_eq!(c.mode, Mode::DryRun);
    assert_eq!(c.metrics_address.to_string(), "127.0.0.1:9847");
    let text = std::fs::read_to_string(example()).unwrap();
    let effective: yaml_serde::Value = yaml_serde::from_str(&c.to_effective_yaml()).unwrap();
    for key in effective.as_mapping().unwrap().keys() {
        let k = key.as_str().unwrap();
        assert!(
            text.contains(&format!("{k}:")),
            "config/qosd.yaml does not mention {k}"
        );
    }
}

/// Every bad value: (yaml, field as reported, value as reported, a piece of "allowed").
#[rustfmt::skip]
const BAD: &[(&str, &str, &str, &str)] = &[
    ("evictionHard: {memory.availble: 1Gi}", "evictionHard[\"memory.availble\"]", "1Gi", "memory.available"),
    ("evictionHard: {memory.available: 1Qi}", "evictionHard[\"memory.available\"]", "1Qi", "percentage"),
    ("evictionHard: {memory.available: -1Gi}", "evictionHard[\"memory.available\"]", "-1Gi", "positive quantity"),
    ("evictionHard: {memory.available: \"0\"}", "evictionHard[\"memory.available\"]", "0", "positive quantity"),
    ("evictionMinimumReclaim: {memory.available: 0%}", "evictionMinimumReclaim[\"memory.available\"]", "0%", "positive percentage"),
    ("imageGCHighThresholdPercent: 101", "imageGCHighThresholdPercent", "101", "0..100"),
    ("imageGCLowThresholdPercent: 90", "imageGCLowThresholdPercent", "90", "below imageGCHighThresholdPercent"),
    ("imageMinimumGCAge: 2 minutes", "imageMinimumGCAge", "2 minutes", "Go duration"),
    ("podLogsDir: var/log/pods", "podLogsDir", "var/log/pods", "absolute path"),
    ("imageMaximumGCAge: 1m", "imageMaximumGCAge", "1m0s", "greater than imageMinimumGCAge"),
    ("imageMaximumGCAge: -1h", "imageMaximumGCAge", "-1h", "Go duration"),
    ("evictionHard: {nodefs.available: 101%}", "evictionHard[\"nodefs.available\"]", "101%", "0%..100%"),
    ("evictionHard: {nodefs.available: -5%}", "evictionHard[\"nodefs.available\"]", "-5%", "0%..100%"),
    ("evictionHard: {nodefs.available: x%}", "evictionHard[\"nodefs.available\"]", "x%", "percentage"),
    ("evictionSoft: {memory.available: 1Gi}", "evictionSoft[\"memory.available\"]", "1Gi", "evictionSoftGracePeriod"),
    ("evictionSoft: {bogus: 1Gi}", "evictionSoft[\"bogus\"]", "1Gi", "signals"),
    ("evictionSoftGracePeriod: {memory.available: 90}", "evictionSoftGracePeriod[\"memory.available\"]", "90", "Go duration"),
    ("evictionSoftGracePeriod: {memory.available: -1m}", "evictionSoftGracePeriod[\"memory.available\"]", "-1m", "Go duration"),
    ("evictionMinimumReclaim: {memory.available: lots}", "evictionMinimumReclaim[\"memory.available\"]", "lots", "quantity"),
    ("evictionMinimumReclaim: {disk: 1Gi}", "evictionMinimumReclaim[\"disk\"]", "1Gi", "signals"),
    ("evictionMaxPodGracePeriod: -1", "evictionMaxPodGracePeriod", "-1", "0..2147483647"),
    ("evictionMaxPodGracePeriod: 30s", "evictionMaxPodGracePeriod", "30s", "integer"),
    ("evictionMaxPodGracePeriod: 3000000000", "evictionMaxPodGracePeriod", "3000000000", "integer"),
    ("evictionPressureTransitionPeriod: 5 minutes", "evictionPressureTransitionPeriod", "5 minutes", "5m0s"),
    ("mergeDefaultEvictionSettings: maybe", "mergeDefaultEvictionSettings", "maybe", "true | false"),
    ("evictionPressureHard: {memory.full: 10%/100ms}", "evictionPressureHard[\"memory.full\"]", "10%/100ms", "500ms..10s"),
    ("evictionPressureHard: {memory.available: 10%}", "evictionPressureHard[\"memory.available\"]", "10%", "memory.some, memory.full"),
    ("evictionPressureSoft: {memory.some: 0%}", "evictionPressureSoft[\"memory.some\"]", "0%", "(0%, 100%]"),
    ("evictionPressureSoft: {memory.some: 30%}", "evictionPressureSoft[\"memory.some\"]", "30%", "evictionPressureSoftGracePeriod"),
    ("evictionPressureSoftGracePeriod: {memory.some: 1 minute}", "evictionPressureSoftGracePeriod[\"memory.some\"]", "1 minute", "Go duration"),
    ("cgroupDriver: systemd-ish", "cgroupDriver", "systemd-ish", "cgroupfs | systemd"),
    ("cgroupRoot: kubepods", "cgroupRoot", "kubepods", "absolute"),
    ("cgroupRoot: /a/../b", "cgroupRoot", "/a/../b", "no . or .."),
    ("systemReserved: {cpu: lots}", "systemReserved[\"cpu\"]", "lots", "quantity"),
    ("systemReserved: {gpu: 1}", "systemReserved[\"gpu\"]", "1", "ephemeral-storage"),
    ("systemReserved: {memory: -1Gi}", "systemReserved[\"memory\"]", "-1Gi", "non-negative"),
    ("kubeReserved: {memory: 1GB}", "kubeReserved[\"memory\"]", "1GB", "quantity"),
    ("{systemReserved: {cpu: \"5e15\"}, kubeReserved: {cpu: \"5e15\"}}", "systemReserved + kubeReserved", "cpu 5e15 + 5e15, memory 0 + 0", "at most 2^63-1"),
    ("{systemReserved: {memory: 5Ei}, kubeReserved: {memory: 4Ei}}", "systemReserved + kubeReserved", "cpu 0 + 0, memory 5Ei + 4Ei", "at most 2^63-1"),
    ("kubeReserved: {hugepages-huge: 1}", "kubeReserved[\"hugepages-huge\"]", "1", "hugepages-<size>"),
    ("qosReserved: {memory: 150%}", "qosReserved[\"memory\"]", "150%", "50%"),
    ("qosReserved: {memory: 50}", "qosReserved[\"memory\"]", "50", "50%"),
    ("qosReserved: {cpu: 50%}", "qosReserved[\"cpu\"]", "50%", "only memory"),
    ("cpuCFSQuota: yes", "cpuCFSQuota", "yes", "true | false"),
    ("cpuCFSQuotaPeriod: 2s", "cpuCFSQuotaPeriod", "2s", "at most 1s"),
    ("cpuCFSQuotaPeriod: 500us", "cpuCFSQuotaPeriod", "500us", "at least 1ms"),
    ("memoryThrottlingFactor: 0", "memoryThrottlingFactor", "0", "greater than 0"),
    ("memoryThrottlingFactor: 1.5", "memoryThrottlingFactor", "1.5", "at most 1"),
    ("memoryReservationPolicy: HardReservation", "memoryReservationPolicy", "HardReservation", "None | TieredReservation"),
    ("enforceNodeAllocatable: [pods, everything]", "enforceNodeAllocatable", "pods,everything", "system-reserved"),
    ("enforceNodeAllocatable: [pods, kube-reserved]", "kubeReservedCgroup", "", "e.g. /system.slice"),
    ("systemReservedCgroup: system.slice", "systemReservedCgroup", "system.slice", "absolute cgroup path"),
    ("kubeReservedCgroup: /a/../kube.slice", "kubeReservedCgroup", "/a/../kube.slice", "no . or .."),
    ("kubeletVersion: 1.99", "kubeletVersion", "1.99", "1.33 | 1.34 | 1.35 | 1.36"),
    ("cpuManagerPolicy: dynamic", "cpuManagerPolicy", "dynamic", "none | static"),
    ("cpuManagerPolicy: static\ncpuManagerPolicyOptions: {bogus: \"true\"}", "cpuManagerPolicyOptions", "{\"bogus\": \"true\"}", "full-pcpus-only"),
    ("cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}", "cpuManagerPolicyOptions", "{\"full-pcpus-only\": \"true\"}", "need cpuManagerPolicy static"),
    ("evictionHard: {memory.available: \" 100Mi\"}", "evictionHard[\"memory.available\"]", " 100Mi", "a positive quantity"),
    ("evictionSoft: {memory.available: \"200Mi \"}\nevictionSoftGracePeriod: {memory.available: 1m}", "evictionSoft[\"memory.available\"]", "200Mi ", "a positive quantity"),
    ("evictionHard: {nodefs.available: \" 10%\"}", "evictionHard[\"nodefs.available\"]", " 10%", "a positive quantity"),
    ("evictionMinimumReclaim: {memory.available: \" 1Gi\"}", "evictionMinimumReclaim[\"memory.available\"]", " 1Gi", "non-negative quantity"),
    ("reservedSystemCPUs: x-y", "reservedSystemCPUs", "x-y", "a CPU list"),
    ("cpuManagerStateDir: relative/dir", "cpuManagerStateDir", "relative/dir", "absolute path"),
    ("stateDir: relative/dir", "stateDir", "relative/dir", "absolute path"),
    ("kubeletCPUManagerState: relative", "kubeletCPUManagerState", "relative", "absolute path"),
    ("cgroupfs: sys/fs/cgroup", "cgroupfs", "sys/fs/cgroup", "absolute path"),
    ("cgroupVersion: v3", "cgroupVersion", "v3", "auto | v1 | v2"),
    ("runtimeEndpoint: tcp://127.0.0.1:1234", "runtimeEndpoint", "tcp://127.0.0.1:1234", "unix:///"),
    ("runtimeEndpoint: containerd.sock", "runtimeEndpoint", "containerd.sock", "unix:///"),
    ("runtimeEndpoint: unix://", "runtimeEndpoint", "unix://", "unix:///"),
    ("mode: enforcing", "mode", "enforcing", "enforce | dry-run"),
    ("reconcileInterval: 10", "reconcileInterval", "10", "Go duration"),
    ("reconcileInterval: 1ms", "reconcileInterval", "1ms", "at least 100ms"),
    ("relistInterval: 2h", "relistInterval", "2h", "at most 1h0m0s"),
    ("relistInterval: 1d", "relistInterval", "1d", "Go duration"),
    ("metricsAddress: localhost:9847", "metricsAddress", "localhost:9847", "IP:port"),
    ("metricsAddress: 127.0.0.1", "metricsAddress", "127.0.0.1", "IP:port"),
    ("metricsAddress: 127.0.0.1:99999", "metricsAddress", "127.0.0.1:99999", "IP:port"),
    ("rootDir: var/lib/kubelet", "rootDir", "var/lib/kubelet", "absolute path"),
    ("imagefsPath: images", "imagefsPath", "images", "absolute path"),
    ("memoryAvailableSource: free", "memoryAvailableSource", "free", "workingset | meminfo"),
    ("cpuWeightFormula: linear", "cpuWeightFormula", "linear", "kubelet | runc"),
    ("memoryQoS: on", "memoryQoS", "on", "true | false"),
    ("nodeCPU: 0", "nodeCPU", "0", "positive"),
    ("nodeCPU: eight", "nodeCPU", "eight", "positive"),
    ("nodeMemory: -32Gi", "nodeMemory", "-32Gi", "positive"),
    ("logFormat: xml", "logFormat", "xml", "text | json"),
    ("hugepageSizes: 3Mx", "hugepageSizes", "3Mx", "2Mi,1Gi"),
    ("logLevel: \"qosd=loud\"", "logLevel", "qosd=loud", "qosd=debug,info"),
    ("evictionHook: hook.sh", "evictionHook", "hook.sh", "absolute path"),
    ("evictionHookTimeout: 1h", "evictionHookTimeout", "1h", "at most 10m0s"),
    ("evictionBackend: sigterm", "evictionBackend", "sigterm", "kill | cri | api | dry-run"),
    ("kubeconfig: admin.conf", "kubeconfig", "admin.conf", "absolute path"),
    ("nodeName: Worker_1", "nodeName", "Worker_1", "DNS subdomain"),
    ("apiEvictionTimeout: 5ms", "apiEvictionTimeout", "5ms", "at least 10ms"),
    ("apiEvictionTimeout: 2m", "apiEvictionTimeout", "2m", "at most 1m0s"),
    ("runtimeUnhealthyAfter: soon", "runtimeUnhealthyAfter", "soon", "Go duration"),
    ("podPidsLimit: many", "podPidsLimit", "many", "-1: no limit"),
    ("imageGCHighThresholdPercent: 101", "imageGCHighThresholdPercent", "101", "0..100"),
    ("imageGCLowThresholdPercent: 90", "imageGCLowThresholdPercent", "90", "below imageGCHighThresholdPercent"),
    ("cgroupEnforcement: observe", "cgroupEnforcement", "observe", "enforce | audit"),
];

#[test]
fn every_bad_value_names_field_value_and_allowed() {
    for &(yaml, field, value, allowed) in BAD {
        let e = errors(yaml);
        let inv = e.invalid_values();
        assert_eq!(
            inv.len(),
            1,
            "{yaml:?}: expected exactly one error, got {e}"
        );
        let i = &inv[0];
        assert_eq!(i.field, field, "{yaml:?}");
        assert_eq!(i.value, value, "{yaml:?}");
        assert!(
            i.allowed.contains(allowed),
            "{yaml:?}: allowed {:?} lacks {allowed:?}",
            i.allowed
        );
        let msg = e.to_string();
        assert!(
            msg.contains(field) && msg.contains(&format!("{value:?}")),
            "{msg}"
        );
    }
}

#[test]
fn every_field_has_an_error_case() {
    // Each top-level field of the effective config appears in the BAD table.
    let effective: yaml_serde::Value =
        yaml_serde::from_str(&Config::default().to_effective_yaml()).unwrap();
    for key in effective.as_mapping().unwrap().keys() {
        let k = key.as_str().unwrap();
        assert!(
            BAD.iter()
                .any(|(_, f, _, _)| f.split('[').next() == Some(k)),
            "no error case for {k}"
        );
    }
}

#[test]
fn all_errors_are_reported_at_once() {
    let e = errors("mode: x\nlogFormat: y\ncgroupVersion: z\n");
    let fields: Vec<&str> = e
        .invalid_values()
        .iter()
        .map(|i| i.field.as_str())
        .collect();
    assert_eq!(fields, ["cgroupVersion", "mode", "logFormat"]);
    assert!(e.to_string().starts_with("3 invalid values:"), "{e}");
}

#[test]
fn structural_errors() {
    // Unknown field (a typo must not silently disable eviction), with a hint.
    let e = errors("evictonHard:\n  memory.available: 1Gi\n");
    let msg = e.to_string();
    assert!(matches!(e, ConfigError::Parse { .. }));
    assert!(msg.contains("unknown field `evictonHard`"), "{msg}");
    assert!(msg.contains("did you mean `evictionHard`?"), "{msg}");
    // Far from anything: no suggestion.
    let msg = errors("zzzzzzzzzzzz: 1\n").to_string();
    assert!(
        msg.contains("unknown field") && !msg.contains("did you mean"),
        "{msg}"
    );
    // Wrong shape names the field.
    let msg = errors("evictionHard: 100Mi\n").to_string();
    assert!(msg.contains("evictionHard"), "{msg}");
    let msg = errors("systemReserved: [cpu, 1]\n").to_string();
    assert!(msg.contains("systemReserved"), "{msg}");
    // Duplicate keys.
    let msg = errors("mode: enforce\nmode: dry-run\n").to_string();
    assert!(msg.contains("duplicate"), "{msg}");
    // Not a mapping at all / broken YAML.
    assert!(matches!(errors("- a\n- b\n"), ConfigError::Parse { .. }));
    assert!(matches!(errors("mode: [\n"), ConfigError::Parse { .. }));
}

#[test]
fn scalars_of_any_type_are_accepted_as_text() {
    let c = Config::from_yaml_str("systemReserved: {cpu: 1.5, memory: 1073741824}\n").unwrap();
    assert_eq!(c.system_reserved["cpu"].milli_ceil(), 1500);
    assert_eq!(c.system_reserved["memory"].value_ceil(), 1 << 30);
    let c = Config::from_yaml_str("evictionHard: {pid.available: 500}\n").unwrap();
    assert_eq!(c.eviction_hard[&sig("pid.available")].as_written(), "500");
}

#[test]
fn runtime_endpoint_forms() {
    for (given, want) in [
        (
            "/run/containerd/containerd.sock",
            "unix:///run/containerd/containerd.sock",
        ),
        (
            "unix:///var/run/crio/crio.sock",
            "unix:///var/run/crio/crio.sock",
        ),
    ] {
        let c = Config::from_yaml_str(&format!("runtimeEndpoint: {given}\n")).unwrap();
        assert_eq!(c.runtime_endpoint, want);
    }
    // The kubelet's field name works too.
    let c = Config::from_yaml_str("containerRuntimeEndpoint: /run/x.sock\n").unwrap();
    assert_eq!(c.runtime_endpoint, "unix:///run/x.sock");
}

#[test]
fn overrides_replace_file_values_and_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.yaml");
    std::fs::write(
        &f,
        "mode: enforce\nrelistInterval: 2s\nevictionHard: {memory.available: 1Gi}\n",
    )
    .unwrap();
    let o = Overrides {
        mode: Some("dry-run".into()),
        eviction_hard: Some([("nodefs.available".to_string(), "20%".to_string())].into()),
        ..Default::default()
    };
    let c = Config::load_with(Some(&f), &o).unwrap();
    assert_eq!(c.mode, Mode::DryRun);
    assert_eq!(
        c.relist_interval,
        Duration::from_secs(2),
        "untouched field kept"
    );
    assert_eq!(c.eviction_hard.len(), 1);
    assert_eq!(
        c.eviction_hard[&sig("nodefs.available")].as_written(),
        "20%"
    );

    let bad = Overrides {
        relist_interval: Some("soon".into()),
        ..Default::default()
    };
    let e = Config::load_with(Some(&f), &bad).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("relistInterval (from command-line flag)"),
        "{msg}"
    );
    assert!(msg.contains(&f.display().to_string()), "{msg}");
    // No file: overrides on the defaults.
    let c = Config::load_with(None, &o).unwrap();
    assert_eq!(c.relist_interval, Duration::from_secs(1));
}

#[test]
fn load_errors_name_the_file() {
    let e = Config::load(Path::new("/nonexistent/qosd.yaml")).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(e.to_string().contains("/nonexistent/qosd.yaml"));
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(&f, "mode: nope\n").unwrap();
    let e = Config::load(&f).unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("config file {}: mode", f.display())),
        "{e}"
    );
}

// --- CLI ------------------------------------------------------------------

fn qosd() -> Command {
    Command::cargo_bin("qosd").unwrap()
}

#[test]
fn cli_check_prints_effective_config() {
    let out = qosd()
        .args(["config", "check"])
        .arg(example())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let y = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        Config::from_yaml_str(&y).unwrap(),
        Config::load(&example()).unwrap()
    );
    assert!(y.contains("evictionPressureTransitionPeriod: 5m0s"), "{y}");

    let out = qosd()
        .args(["config", "check", "--output", "json"])
        .arg(example())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["metricsAddress"], "127.0.0.1:9847");

    let out = qosd()
        .args(["config", "check", "-q"])
        .arg(example())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
}

#[test]
fn cli_check_bad_config_exits_2_naming_field_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bad.yaml");
    std::fs::write(
        &f,
        "evictionHard:\n  memory.available: 10Qi\nrelistInterval: sometimes\n",
    )
    .unwrap();
    let out = qosd().args(["config", "check"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "nothing printed on stdout for a bad config"
    );
    let err = String::from_utf8(out.stderr).unwrap();
    for piece in [
        "evictionHard[\"memory.available\"]",
        "\"10Qi\"",
        "relistInterval",
        "\"sometimes\"",
        "allowed:",
        f.to_str().unwrap(),
    ] {
        assert!(err.contains(piece), "{piece:?} missing from:\n{err}");
    }

    // Unknown field, missing file: also bad input.
    std::fs::write(&f, "evictionHardd: {}\n").unwrap();
    let out = qosd().args(["config", "check"]).arg(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("evictionHardd"));
    let out = qosd()
        .args(["config", "check", "/nonexistent/qosd.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cli_default_prints_the_defaults() {
    let out = qosd().args(["config", "default"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let y = String::from_utf8(out.stdout).unwrap();
    assert_eq!(Config::from_yaml_str(&y).unwrap(), Config::default());
}

/// `qosd config check FILE` and `qosd run --config FILE` validate through
/// the same function: on a file with three bad values both exit 2 and list
/// the same three errors, each with its field and value.
#[test]
fn run_and_check_report_the_same_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("qosd.yaml");
    std::fs::write(
        &file,
        "mode: sideways\nevictionHard: {memory.available: 10Zq}\nreconcileInterval: forever\n",
    )
    .unwrap();
    let error_lines = |args: &[&str]| -> Vec<String> {
        let out = qosd().args(args).arg(&file).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        let lines: Vec<String> = stderr
            .lines()
            .filter(|l| l.starts_with("  - "))
            .map(str::to_string)
            .collect();
        assert!(stderr.contains("3 invalid values:"), "{args:?}: {stderr}");
        lines
    };
    let check = error_lines(&["config", "check"]);
    let run = error_lines(&["run", "--config"]);
    assert_eq!(check.len(), 3, "{check:?}");
    for (field, value) in [
        ("evictionHard[\"memory.available\"]", "\"10Zq\""),
        ("mode", "\"sideways\""),
        ("reconcileInterval", "\"forever\""),
    ] {
        let prefix = format!("  - {field}: invalid value {value}");
        assert!(
            check.iter().any(|l| l.starts_with(&prefix)),
            "{prefix} not in {check:?}"
        );
    }
    assert_eq!(run, check);
}
