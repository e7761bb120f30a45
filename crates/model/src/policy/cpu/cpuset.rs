//! Sets of logical CPU ids in the Linux list format (`0-3,8,10-11`), as
//! `/sys/devices/system/cpu/online`, `cpuset.cpus` and the kubelet's
//! `cpu_manager_state` write them (k8s.io/utils/cpuset `Parse` / `String`).

use std::collections::BTreeSet;
use std::fmt;

/// A CPU list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list {input:?}: {reason}")]
pub struct CpuSetError {
    pub(crate) input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A set of logical CPU ids, always sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet(BTreeSet<u32>);

/// The largest CPU id accepted (Linux supports at most 8192 CPUs on
/// x86-64 today; this leaves room while keeping any range small).
pub(crate) const MAX_CPU_ID: u32 = 65_535;

impl CpuSet {
    pub(crate) fn new() -> CpuSet {
        CpuSet(BTreeSet::new())
    }

    /// Parse a CPU list. Empty (or only whitespace) is the empty set; a
    /// trailing newline (sysfs) is accepted; every element is `N` or `A-B`
    /// with `A <= B`, like the Go `cpuset.Parse`. Ids above 65535 are
    /// refused.
    pub fn parse(s: &str) -> Result<CpuSet, CpuSetError> {
        let err = |reason: String| CpuSetError {
            input: s.to_string(),
            reason,
        };
        let t = s.trim();
        if t.is_empty() {
            return Ok(CpuSet::new());
        }
        // Ranges first, expanded once at the end: `0-65535,0-65535,…`
        // repeated over a large input costs one expansion, not one per
        // repetition (a hostile list cannot make this quadratic).
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for part in t.split(',') {
            let num = |x: &str| {
                let id = x
                    .parse::<u32>()
                    .map_err(|_| err(format!("{x:?} is not a CPU id")))?;
                // A range like `0-4294967295` (a broken runtime answer or
                // state file) would expand into billions of entries.
                if id > MAX_CPU_ID {
                    return Err(err(format!(
                        "CPU id {id} is above the largest supported ({MAX_CPU_ID})"
                    )));
                }
                Ok(id)
            };
            match part.split_once('-') {
                None => {
                    let id = num(part)?;
                    ranges.push((id, id));
                }
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        return Err(err(format!("range {part:?} is inverted")));
                    }
                    ranges.push((a, b));
                }
            }
        }
        ranges.sort_unstable();
        let mut ids = Vec::new();
        let mut next = 0u32; // the lowest id not yet in `ids`
        for (a, b) in ranges {
            let a = if ids.is_empty() { a } else { a.max(next) };
            if a <= b {
                ids.extend(a..=b);
                next = b + 1; // b <= MAX_CPU_ID: no overflow
            }
        }
        // Sorted and unique: a bulk build of the tree.
        Ok(CpuSet(ids.into_iter().collect()))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    /// The CPU ids, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub(crate) fn to_vec(&self) -> Vec<u32> {
        self.iter().collect()
    }

    pub(crate) fn union(&self, o: &CpuSet) -> CpuSet {
        CpuSet(self.0.union(&o.0).copied().collect())
    }

    pub(crate) fn intersection(&self, o: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&o.0).copied().collect())
    }

    pub(crate) fn difference(&self, o: &CpuSet) -> CpuSet {
        CpuSet(self.0.difference(&o.0).copied().collect())
    }

    pub(crate) fn is_subset(&self, o: &CpuSet) -> bool {
        self.0.is_subset(&o.0)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> CpuSet {
        CpuSet(iter.into_iter().collect())
    }
}

impl<const N: usize> From<[u32; N]> for CpuSet {
    fn from(a: [u32; N]) -> CpuSet {
        a.into_iter().collect()
    }
}

/// The canonical list form: ascending, runs of two or more as `A-B`
/// (`0-1`, not `0,1`), like `cpuset.CPUSet.String()`; empty set → "".
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.to_vec();
        let mut i = 0;
        let mut first = true;
        while i < v.len() {
            let start = v[i];
            let mut end = start;
            while i + 1 < v.len() && v[i + 1] == end + 1 {
                i += 1;
                end = v[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn huge_ranges_are_refused() {
        // Found by the cgroup_files fuzz target: 872 M entries.
        let e = CpuSet::parse("05,7-872872800,").unwrap_err().to_string();
        assert!(e.contains("above the largest supported"), "{e}");
        assert!(CpuSet::parse("0-4294967295").is_err());
        assert_eq!(CpuSet::parse("0-65535").unwrap().len(), 65_536);
    }

    #[test]
    fn parse_and_format_table() {
        let cases: &[(&str, &[u32], &str)] = &[
            ("", &[], ""),
            ("\n", &[], ""),
            ("0", &[0], "0"),
            ("0-3,8", &[0, 1, 2, 3, 8], "0-3,8"),
            ("0,1", &[0, 1], "0-1"),
            ("5,3,4", &[3, 4, 5], "3-5"),
            ("0-1,4-7\n", &[0, 1, 4, 5, 6, 7], "0-1,4-7"),
            ("2-2", &[2], "2"),
            ("1,1,1", &[1], "1"),
            ("0-2,1-3", &[0, 1, 2, 3], "0-3"),
        ];
        for (input, cpus, canon) in cases {
            let s = CpuSet::parse(input).unwrap();
            assert_eq!(s.to_vec(), *cpus, "{input:?}");
            assert_eq!(s.to_string(), *canon, "{input:?}");
        }
    }

    #[test]
    fn parse_errors() {
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "1.5", " 1 , 2", "1-2-3"] {
            let e = CpuSet::parse(bad).unwrap_err();
            assert_eq!(e.input, bad);
            assert!(e.to_string().contains("invalid CPU list"), "{e}");
        }
    }

    #[test]
    fn set_operations() {
        let a = CpuSet::from([0, 1, 2, 3]);
        let b = CpuSet::from([2, 3, 4]);
        assert_eq!(a.union(&b).to_string(), "0-4");
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert!(CpuSet::from([2]).is_subset(&a));
        assert!(!b.is_subset(&a));
    }

    #[test]
    fn repeated_ranges_expand_once() {
        // A fuzz-sized input of full ranges: one expansion, the same set.
        let text = vec!["0-65535"; 8_000].join(",");
        let s = CpuSet::parse(&text).unwrap();
        assert_eq!(s.len(), 65_536);
        assert_eq!(s.to_string(), "0-65535");
        let s = CpuSet::parse("9,3-5,4-8,0,2-2,65535,7").unwrap();
        assert_eq!(s.to_string(), "0,2-9,65535");
    }

    proptest! {
        #[test]
        fn parse_is_the_union_of_its_ranges(
            ranges in proptest::collection::vec((0u32..300, 0u32..40), 1..20)
        ) {
            let text = ranges
                .iter()
                .map(|&(a, n)| if n == 0 { a.to_string() } else { format!("{a}-{}", a + n) })
                .collect::<Vec<_>>()
                .join(",");
            let naive: BTreeSet<u32> = ranges.iter().flat_map(|&(a, n)| a..=a + n).collect();
            prop_assert_eq!(CpuSet::parse(&text).unwrap().0, naive);
        }

        #[test]
        fn format_parse_roundtrip(cpus in proptest::collection::btree_set(0u32..512, 0..64)) {
            let s: CpuSet = cpus.iter().copied().collect();
            let text = s.to_string();
            prop_assert_eq!(CpuSet::parse(&text).unwrap(), s.clone());
            // canonical: formatting the parse of the text gives the text back
            prop_assert_eq!(CpuSet::parse(&text).unwrap().to_string(), text);
        }
    }
}
