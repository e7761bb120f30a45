//! Kubernetes quantities: never a panic; an accepted value stays within
//! i64 base units and survives a reparse of its own text.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::quantity(data));
