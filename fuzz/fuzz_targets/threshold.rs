//! Eviction thresholds (`memory.available<100Mi,nodefs.available<10%`) and
//! their values for every signal: never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use qosd::policy::evict::threshold::{parse_threshold_flag, parse_threshold_value, Signal};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
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
});
