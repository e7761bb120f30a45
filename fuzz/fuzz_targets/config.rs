//! The configuration file (KubeletConfiguration field names and formats,
//! so this is also the kubelet-config parser's input): never a panic,
//! never a hang (nesting is capped before parsing).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(c) = qosd::config::Config::from_yaml_str(s) {
        let _ = c.to_effective_yaml();
    }
});
