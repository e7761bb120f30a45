//! Exact Kubernetes `resource.Quantity` parsing.
//!
//! Grammar (k8s.io/apimachinery/pkg/api/resource):
//! ```text
//! quantity  ::= [sign] number [suffix]
//! number    ::= digits | digits "." [digits] | "." digits
//! suffix    ::= binarySI | decimalSI | ("e" | "E") [sign] digits
//! binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI ::= n | u | m | "" | k | M | G | T | P | E
//! ```
//! The value is kept exactly to nano precision (anything finer is rounded up,
//! as Kubernetes' canonical form does), in an `i128`, so `0.0001` CPU is
//! exactly 100000n and rounds up to 1m like the kubelet's `MilliValue()`.
//! Values whose magnitude exceeds `i64::MAX` base units are accepted and
//! capped at `i64::MAX` (2^63−1), as `resource.Quantity` caps them: `9Ei`
//! and `1e21` are valid quantities and mean "as much as can be counted".

use std::fmt;

/// Why a quantity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {value:?}: {reason}")]
pub struct QuantityError {
    pub(crate) value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A parsed quantity: exact value in nano-units, plus the text it came from.
#[derive(Debug, Clone)]
pub struct Quantity {
    nanos: i128,
    text: String,
}

const NANO: i128 = 1_000_000_000;
/// Largest accepted magnitude, in nano-units (i64::MAX base units).
const MAX_NANOS: i128 = i64::MAX as i128 * NANO;

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}
impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    // b > 0
    let q = a.div_euclid(b);
    if a.rem_euclid(b) == 0 {
        q
    } else {
        q + 1
    }
}

/// The digits of a quantity's number: up to 36 significant digits as an
/// integer, and the power of ten that scales them.
#[derive(Debug, Clone, Copy)]
struct Number {
    mantissa: u128,
    exp10: i64,
    /// A non-zero fractional digit dropped beyond 36 significant digits:
    /// the value is a hair above what the mantissa says (rounds up).
    sticky: bool,
}

/// Scan `number ::= digits | digits "." [digits] | "." digits` at the start
/// of `bytes`: the number and how many bytes it took.
fn scan_number(bytes: &[u8]) -> Result<(Number, usize), &'static str> {
    let mut n = Number {
        mantissa: 0,
        exp10: 0,
        sticky: false,
    };
    let mut i = 0;
    let mut digits = 0usize;
    let mut seen_point = false;
    let mut significant = 0usize;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() {
            digits += 1;
            if n.mantissa == 0 && c == b'0' {
                // leading zero: no significance
                if seen_point {
                    n.exp10 -= 1;
                }
            } else if significant < 36 {
                n.mantissa = n.mantissa * 10 + u128::from(c - b'0');
                significant += 1;
                if seen_point {
                    n.exp10 -= 1;
                }
            } else if !seen_point {
                // integer digit beyond 36 significant: far out of range anyway
                n.exp10 += 1;
            } else if c != b'0' {
                n.sticky = true;
            }
        } else if c == b'.' {
            if seen_point {
                return Err("more than one decimal point");
            }
            seen_point = true;
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return Err("no digits");
    }
    Ok((n, i))
}

/// The scale of a suffix: `(power of ten, power of two)`.
fn suffix_scale(suffix: &str) -> Result<(i64, u32), &'static str> {
    Ok(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ => (exponent(suffix)?, 0),
    })
}

/// `("e" | "E") [sign] digits`: the power of ten.
fn exponent(suffix: &str) -> Result<i64, &'static str> {
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))
        .ok_or("unknown suffix (allowed: n u m k M G T P E, Ki Mi Gi Ti Pi Ei, e<exp>)")?;
    let (eneg, edigits) = match rest.as_bytes().first() {
        Some(b'+') => (false, &rest[1..]),
        Some(b'-') => (true, &rest[1..]),
        _ => (false, rest),
    };
    if edigits.is_empty() || !edigits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("malformed exponent");
    }
    // resource.Quantity reads the exponent as an int64 (`strconv.ParseInt`
    // with 64 bits: past that range the suffix is refused) and keeps it as
    // an int32, Go's narrowing conversion dropping the high bits:
    // `1e4294967297` is 1e1 = 10 and `1e4294967296` is 1 (apimachinery's
    // TestQuantityOutOfInt32ExponentCompatibility pins both).
    let magnitude: u64 = edigits.parse().map_err(|_| "exponent out of range")?;
    let e: i64 = if eneg {
        if magnitude > i64::MIN.unsigned_abs() {
            return Err("exponent out of range");
        }
        (magnitude as i64).wrapping_neg()
    } else {
        i64::try_from(magnitude).map_err(|_| "exponent out of range")?
    };
    let e = i64::from(e as i32);
    // Past ±10 000 the value is capped, or rounds up to one nano-unit, as
    // at ±10 000: clamp (and keep the arithmetic small).
    Ok(e.clamp(-10_000, 10_000))
}

/// The magnitude `mantissa · 2^exp2 · 10^exp10` in nano-units, rounded up
/// below a nano; `None` past [`MAX_NANOS`] (the value is capped).
fn magnitude_nanos(n: Number, exp2: u32) -> Option<i128> {
    let num = i128::try_from(n.mantissa)
        .ok()?
        .checked_mul(1i128 << exp2)?;
    let scale = n.exp10 + 9;
    let (mut nanos, exact) = if scale >= 0 {
        let v = (scale <= 38)
            .then(|| num.checked_mul(10i128.pow(scale as u32)))
            .flatten()?;
        (v, true)
    } else {
        // ceil(num / 10^k), in steps that fit i128; exact when no remainder.
        let mut k = -scale;
        let mut v = num;
        let mut exact = true;
        while k > 0 {
            let step = k.min(30);
            let d = 10i128.pow(step as u32);
            exact &= v % d == 0;
            v = ceil_div(v, d);
            k -= step;
        }
        (v, exact)
    };
    if n.sticky && exact {
        nanos += 1;
    }
    (nanos <= MAX_NANOS).then_some(nanos)
}

impl Quantity {
    /// Parse a Kubernetes quantity string.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let err = |reason| QuantityError {
            value: s.to_string(),
            reason,
        };
        if s.is_empty() {
            return Err(err("empty string"));
        }
        let bytes = s.as_bytes();
        let (negative, start) = match bytes[0] {
            b'+' => (false, 1),
            b'-' => (true, 1),
            _ => (false, 0),
        };
        let (mut number, len) = scan_number(&bytes[start..]).map_err(err)?;
        let (exp10, exp2) = suffix_scale(&s[start + len..]).map_err(err)?;
        number.exp10 += exp10;
        let nanos = if number.mantissa == 0 {
            0
        } else {
            // value = mantissa · 2^exp2 · 10^exp10, capped at MAX_NANOS
            // (resource.Quantity's cap at 2^63-1); Kubernetes rounds the
            // magnitude up below nano precision.
            let magnitude = magnitude_nanos(number, exp2).unwrap_or(MAX_NANOS);
            if negative {
                -magnitude
            } else {
                magnitude
            }
        };
        Ok(Quantity {
            nanos,
            text: s.to_string(),
        })
    }

    /// A quantity of `m` milli-units (e.g. millicores).
    pub fn from_milli(m: i64) -> Quantity {
        Quantity {
            nanos: i128::from(m) * 1_000_000,
            text: format!("{m}m"),
        }
    }

    /// A quantity of `v` whole units (e.g. bytes).
    pub fn from_value(v: i64) -> Quantity {
        Quantity {
            nanos: i128::from(v) * NANO,
            text: v.to_string(),
        }
    }

    /// The exact value in nano-units (for exact sums of quantities).
    pub fn nanos(&self) -> i128 {
        self.nanos
    }

    /// A quantity from an exact nano-unit value (text: whole units, milli
    /// units or nano units, the first that is exact).
    pub fn from_nanos(nanos: i128) -> Quantity {
        let text = if nanos % NANO == 0 {
            format!("{}", nanos / NANO)
        } else if nanos % 1_000_000 == 0 {
            format!("{}m", nanos / 1_000_000)
        } else {
            format!("{nanos}n")
        };
        Quantity { nanos, text }
    }

    /// The value in milli-units, rounded up (kubelet `MilliValue()`), saturating.
    pub fn milli_ceil(&self) -> i64 {
        let m = ceil_div(self.nanos, 1_000_000);
        m.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// The value in whole units, rounded up (kubelet `Value()`), saturating.
    pub fn value_ceil(&self) -> i64 {
        ceil_div(self.nanos, NANO).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Whether the value is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Whether the value is below zero.
    pub fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The text this quantity was parsed from.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn table_values() {
        let cases: &[(&str, i64, i64)] = &[
            // text, value_ceil, milli_ceil
            ("0", 0, 0),
            ("1", 1, 1000),
            ("500m", 1, 500),
            ("0.5", 1, 500),
            (".5", 1, 500),
            ("5.", 5, 5000),
            ("0.0001", 1, 1),
            ("1.0001", 2, 1001),
            ("100n", 1, 1),
            ("1u", 1, 1),
            ("1k", 1000, 1_000_000),
            ("1M", 1_000_000, 1_000_000_000),
            ("1G", 1_000_000_000, 1_000_000_000_000),
            ("1T", 1_000_000_000_000, 1_000_000_000_000_000),
            ("1P", 1_000_000_000_000_000, 1_000_000_000_000_000_000),
            ("1E", 1_000_000_000_000_000_000, i64::MAX),
            ("1Ki", 1024, 1_024_000),
            ("1Mi", 1 << 20, (1 << 20) * 1000),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("200Mi", 209_715_200, 209_715_200_000),
            ("1Ti", 1 << 40, (1i64 << 40) * 1000),
            ("1Pi", 1 << 50, (1i64 << 50) * 1000),
            ("7Ei", 7 << 60, i64::MAX),
            ("1e3", 1000, 1_000_000),
            ("1E3", 1000, 1_000_000),
            ("1e-3", 1, 1),
            ("1.5e+2", 150, 150_000),
            ("+2", 2, 2000),
            ("-2", -2, -2000),
            ("-0.5", 0, -500),
            ("00700m", 1, 700),
            ("0.000000000001", 1, 1),
            ("0.0000000000000000000000000000000000000000001", 1, 1),
            ("1.0000000000000000000000000000000000000000001", 2, 1001),
        ];
        for &(text, value, milli) in cases {
            let got = q(text);
            assert_eq!(got.value_ceil(), value, "value of {text}");
            assert_eq!(got.milli_ceil(), milli, "milli of {text}");
            assert_eq!(got.as_str(), text);
        }
    }

    #[test]
    fn table_errors() {
        for bad in [
            "", "1.2.3", "10Qi", "--1", "+-1", "1 ", " 1", "Mi", ".", "-", "1e", "1e+", "1ee3",
            "1Kib", "1.5x", "0x10", "1,5",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let e = Quantity::parse("10Qi").unwrap_err();
        assert!(e.to_string().contains("10Qi"), "{e}");
    }

    #[test]
    fn equality_is_by_value() {
        assert_eq!(q("1"), q("1000m"));
        assert_eq!(q("1Ki"), q("1024"));
        assert_eq!(q("1e3"), q("1k"));
        assert_ne!(q("0.0001"), q("0.0002"));
        assert!(q("1Mi") > q("1M"));
    }

    #[test]
    fn largest_value_accepted() {
        assert_eq!(q("9223372036854775807").value_ceil(), i64::MAX);
    }

    #[test]
    fn huge_values_are_capped_like_resource_quantity() {
        for text in [
            "8Ei",
            "9Ei",
            "10E",
            "1e19",
            "1e21",
            "1e1001",
            "1e2147483647",
            "9223372036854775808",
            "100000000000000000000000000000000000000000000",
        ] {
            let v = q(text);
            assert_eq!(v.value_ceil(), i64::MAX, "{text}");
            assert_eq!(v.milli_ceil(), i64::MAX, "{text}");
        }
        assert_eq!(q("-9Ei").value_ceil(), -i64::MAX);
        assert_eq!(q("1e-1001").value_ceil(), 1);
    }

    /// apimachinery `TestQuantityOutOfInt32ExponentCompatibility` and
    /// `TestQuantityOutOfInt32ExponentZero`: the exponent is an int64
    /// narrowed to int32; one past int64 is an unparsable suffix.
    #[test]
    fn exponents_are_narrowed_to_int32_like_resource_quantity() {
        let rows: &[(&str, i64)] = &[
            ("1e4294967296", 1),
            ("1e4294967297", 10),
            ("-1e4294967296", -1),
            ("1e-4294967296", 1),
            ("1e8589934592", 1),
            ("1e+4294967299", 1000),
            ("2e-4294967295", 20),
            ("1e9223372036854775807", 1),
            ("0e2147483648", 0),
            ("-0e-2147483648", 0),
            ("0.000000000000000000000e2147483648", 0),
        ];
        for (text, value) in rows {
            assert_eq!(q(text).value_ceil(), *value, "{text}");
        }
        // 2^31 narrows to −2^31: a tiny positive value, rounded up to a nano.
        assert_eq!(q("1e2147483648").nanos(), 1);
        assert_eq!(q("1e2147483647").value_ceil(), i64::MAX);
        for bad in [
            "1e9223372036854775808",
            "1e-9223372036854775809",
            "1e99999999999999999999",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad} should be refused");
        }
        assert_eq!(q("1e-9223372036854775808").value_ceil(), 1);
    }

    proptest! {
        #[test]
        fn milli_roundtrip(m in 0i64..1_000_000_000_000) {
            let text = format!("{m}m");
            prop_assert_eq!(q(&text).milli_ceil(), m);
            prop_assert_eq!(Quantity::from_milli(m).milli_ceil(), m);
        }

        #[test]
        fn binary_suffixes_are_exact(v in 0i64..1_000_000, idx in 0usize..4) {
            let (suf, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)][idx];
            prop_assert_eq!(q(&format!("{v}{suf}")).value_ceil(), v << shift);
        }

        #[test]
        fn decimal_fraction_rounds_up(int in 0i64..100_000, frac in 1u32..999_999) {
            // int.frac (6 digits) as cores → millicores rounded up
            let text = format!("{int}.{frac:06}");
            let exact_micro = int as i128 * 1_000_000 + frac as i128;
            let want = ((exact_micro + 999) / 1000) as i64;
            prop_assert_eq!(q(&text).milli_ceil(), want);
        }

        #[test]
        fn never_panics(s in "\\PC{0,24}") {
            let _ = Quantity::parse(&s);
        }
    }
}
