//! Go durations: never a panic; an accepted value fits Go's int64
//! nanoseconds and its formatted text parses back to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;
use qosd::core::duration::{format_go_duration, parse_go_duration};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(d) = parse_go_duration(s) {
        assert!(d.as_nanos() <= i64::MAX as u128);
        assert_eq!(parse_go_duration(&format_go_duration(d)).unwrap(), d);
    }
});
