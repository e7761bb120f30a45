//! The CRI verbose `info` JSON (containerd's sandbox and container
//! status): never a panic; reconstructed CPU limits are never negative.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::cri_info(data));
