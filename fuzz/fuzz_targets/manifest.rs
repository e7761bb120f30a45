//! Pod manifests (YAML, JSON, lists, multi-document): never a panic; every
//! accepted pod has a plain uid (it becomes a cgroup path).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    for source in ["fuzz.yaml", "fuzz.json"] {
        if let Ok(pods) = qosd::manifest::parse_str(s, source) {
            for p in &pods {
                assert!(qosd::core::uid::validate_uid(&p.uid).is_ok(), "{:?}", p.uid);
                let _ = qosd::core::qos::classify(p);
            }
        }
    }
});
