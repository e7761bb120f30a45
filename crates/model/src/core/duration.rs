//! Go `time.Duration` syntax (`300ms`, `1m30s`, `5m0s`): the one duration
//! syntax qosd reads and writes, in the config file, on flags and in
//! thresholds, as the kubelet does.

use std::time::Duration;

/// Parse a Go `time.Duration` string (`300ms`, `1.5s`, `1m30s`, `5m0s`,
/// `1h`); `0` alone is zero. Negative durations are rejected.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s.starts_with('-') {
        return Err("negative duration".into());
    }
    let s_body = s.strip_prefix('+').unwrap_or(s);
    let b = s_body.as_bytes();
    let mut i = 0;
    let mut total: u128 = 0; // nanoseconds
    while i < b.len() {
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int_part = &s_body[start..i];
        let mut frac_part = "";
        if i < b.len() && b[i] == b'.' {
            i += 1;
            let fs = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            frac_part = &s_body[fs..i];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return Err("expected a number".into());
        }
        let us = i;
        while i < b.len() && !b[i].is_ascii_digit() && b[i] != b'.' {
            i += 1;
        }
        let unit: u128 = match &s_body[us..i] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err("missing unit (ns, us, ms, s, m, h)".into()),
            _ => {
                return Err(format!(
                    "unknown unit {:?} (ns, us, ms, s, m, h)",
                    &s_body[us..i]
                ))
            }
        };
        let int: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse()
                .map_err(|_| "number too large".to_string())?
        };
        let mut v = int.checked_mul(unit).ok_or("duration too large")?;
        if !frac_part.is_empty() {
            let digits = &frac_part[..frac_part.len().min(18)];
            let f: u128 = digits.parse().map_err(|_| "bad fraction".to_string())?;
            v = f
                .checked_mul(unit)
                .map(|x| x / 10u128.pow(digits.len() as u32))
                .and_then(|x| v.checked_add(x))
                .ok_or("duration too large")?;
        }
        total = total.checked_add(v).ok_or("duration too large")?;
        if total > i64::MAX as u128 {
            return Err("duration too large".into());
        }
    }
    Ok(Duration::from_nanos(total as u64))
}

/// Format a duration like Go's `time.Duration.String()` (`5m0s`, `100ms`, `1.5s`).
pub fn format_go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    fn frac(v: u128, unit: u128, suffix: &str) -> String {
        let int = v / unit;
        let rem = v % unit;
        if rem == 0 {
            return format!("{int}{suffix}");
        }
        let width = (unit.ilog10()) as usize;
        let f = format!("{rem:0width$}");
        format!("{int}.{}{suffix}", f.trim_end_matches('0'))
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return frac(ns, 1_000, "µs");
    }
    if ns < 1_000_000_000 {
        return frac(ns, 1_000_000, "ms");
    }
    let h = ns / 3_600_000_000_000;
    let rest = ns % 3_600_000_000_000;
    let m = rest / 60_000_000_000;
    let s_ns = rest % 60_000_000_000;
    let secs = frac(s_ns, 1_000_000_000, "s");
    if h > 0 {
        format!("{h}h{m}m{secs}")
    } else if m > 0 {
        format!("{m}m{secs}")
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_is_an_error_never_a_wrap() {
        // Go's limit: 2562047h47m16.854775807s (i64 nanoseconds).
        let max = parse_go_duration("2562047h47m16.854775807s").unwrap();
        assert_eq!(max.as_nanos(), i64::MAX as u128);
        for bad in [
            "2562047h47m16.854775808s",
            "2562048h",
            "9223372036854775808ns",
            "99999999999999999999999999999999999999999h",
            "1h9223372036854775807ns",
            "18446744073709551616ns",
            "5124095576030431h",
        ] {
            let e = parse_go_duration(bad).unwrap_err();
            assert!(e.contains("too large"), "{bad}: {e}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics_and_stays_in_range(s in "[0-9.]{0,24}(ns|us|ms|s|m|h)([0-9]{0,20}(s|h))?") {
            if let Ok(d) = parse_go_duration(&s) {
                proptest::prop_assert!(d.as_nanos() <= i64::MAX as u128);
            }
        }
    }

    #[test]
    fn go_durations_parse() {
        let cases: &[(&str, u64)] = &[
            ("0", 0),
            ("0s", 0),
            ("300ms", 300_000_000),
            ("1.5s", 1_500_000_000),
            ("1m30s", 90_000_000_000),
            ("5m0s", 300_000_000_000),
            ("1h", 3_600_000_000_000),
            ("1h0m0s", 3_600_000_000_000),
            ("2h45m", 9_900_000_000_000),
            ("10us", 10_000),
            ("10µs", 10_000),
            ("7ns", 7),
            (".5s", 500_000_000),
            ("+1s", 1_000_000_000),
        ];
        for &(s, ns) in cases {
            assert_eq!(parse_go_duration(s), Ok(Duration::from_nanos(ns)), "{s}");
        }
        for bad in ["", "5", "-1s", "1x", "s", "1.s.", "1 s", "1d", "abc", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn go_durations_format() {
        let cases: &[(u64, &str)] = &[
            (0, "0s"),
            (7, "7ns"),
            (1_500, "1.5µs"),
            (100_000_000, "100ms"),
            (1_500_000_000, "1.5s"),
            (10_000_000_000, "10s"),
            (90_000_000_000, "1m30s"),
            (300_000_000_000, "5m0s"),
            (3_600_000_000_000, "1h0m0s"),
            (3_661_500_000_000, "1h1m1.5s"),
        ];
        for &(ns, want) in cases {
            assert_eq!(format_go_duration(Duration::from_nanos(ns)), want);
            assert_eq!(
                parse_go_duration(want),
                Ok(Duration::from_nanos(ns)),
                "round trip {want}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn go_duration_roundtrip(ns in 0u64..(1u64 << 62)) {
            let d = Duration::from_nanos(ns);
            proptest::prop_assert_eq!(parse_go_duration(&format_go_duration(d)), Ok(d));
        }
    }
}
