//! The configuration file (KubeletConfiguration field names and formats,
//! so this is also the kubelet-config parser's input): never a panic,
//! never a hang (nesting is capped before parsing).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::config(data));
