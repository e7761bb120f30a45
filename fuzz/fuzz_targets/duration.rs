//! Go durations: never a panic; an accepted value fits Go's int64
//! nanoseconds and its formatted text parses back to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::duration(data));
