//! Eviction thresholds (`memory.available<100Mi,nodefs.available<10%`) and
//! their values for every signal: never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::threshold(data));
