//! Kubernetes quantities: never a panic; an accepted value stays within
//! i64 base units and survives a reparse of its own text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use qosd::core::quantity::Quantity;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(q) = Quantity::parse(s) {
        assert!(q.nanos().abs() <= i64::MAX as i128 * 1_000_000_000);
        let _ = (q.milli_ceil(), q.value_ceil());
        let again = Quantity::from_nanos(q.nanos());
        assert_eq!(Quantity::parse(again.as_str()).unwrap().nanos(), q.nanos());
    }
});
