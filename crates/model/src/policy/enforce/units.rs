//! The systemd cgroup driver's view of a plan: which slice unit each planned
//! cgroup is, and which unit properties carry its values — what the kubelet's
//! systemd cgroup manager (libcontainer's systemd manager) hands systemd over
//! D-Bus before it checks the files.
//!
//! Pure: no I/O. `sys::systemd` sends these properties; `qosd plan` prints
//! them beside the files.
//!
//! Property ↔ file (systemd.resource-control(5); every property is a D-Bus
//! `t`, u64, and `u64::MAX` means "infinity" = `max`):
//!
//! | cgroup v2 file | property | cgroup v1 file | property |
//! |---|---|---|---|
//! | `cpu.weight` (1..=10000) | `CPUWeight` | `cpu.shares` | `CPUShares` |
//! | `cpu.max` `Q P` | `CPUQuotaPerSecUSec` = Q·10⁶/P µs per s, `CPUQuotaPeriodUSec` = P | `cpu.cfs_quota_us` + `cpu.cfs_period_us` | the same two |
//! | `memory.max` | `MemoryMax` | `memory.limit_in_bytes` | `MemoryLimit` |
//! | `memory.min` / `memory.low` / `memory.high` | `MemoryMin` / `MemoryLow` / `MemoryHigh` | | |
//! | `pids.max` | `TasksMax` | `pids.max` | `TasksMax` |
//!
//! systemd writes `cpu.max` back as `CPUQuotaPerSecUSec·P/10⁶` and keeps the
//! quota in its drop-ins as a percentage with two decimals (100 µs per second
//! of resolution): the kubelet's quotas (`millicpu·100` µs per 100 ms) are
//! multiples of 1000 µs per second, so the value survives `daemon-reload`
//! exactly. (libcontainer rounds the property up to 10 ms per second and
//! then writes the exact file itself, which a reload undoes; qosd sends the
//! exact value instead.)

use std::collections::BTreeMap;

use serde::Serialize;

use crate::core::model::{CgroupLevel, CgroupWrite};

/// systemd's "infinity" for u64 properties.
pub(crate) const INFINITY: u64 = u64::MAX;

/// One unit property with its value (all resource properties are u64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UnitProperty {
    /// The property's name (`MemoryMax`, `CPUWeight`, ...).
    pub name: &'static str,
    /// The value (`u64::MAX` is systemd's `infinity`).
    pub value: u64,
}

impl UnitProperty {
    /// `Name=value` as `systemctl show` spells it (`infinity` for max).
    pub fn render(&self) -> String {
        if self.value == INFINITY {
            format!("{}=infinity", self.name)
        } else {
            format!("{}={}", self.name, self.value)
        }
    }
}

/// One slice unit of the plan: its name, its cgroup and the properties that
/// carry the plan's values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedUnit {
    /// `kubepods-burstable-pod<uid>.slice`.
    pub unit: String,
    /// The parent slice (`-.slice` at the top).
    pub(crate) parent: String,
    /// The cgroup path relative to the hierarchy root (the slice path).
    pub(crate) cgroup: String,
    #[serde(skip)]
    pub(crate) level: CgroupLevel,
    /// Properties in plan order; rendered as an object in JSON.
    #[serde(serialize_with = "props_as_map")]
    pub properties: Vec<UnitProperty>,
    /// Planned files no property expresses (written to cgroupfs directly,
    /// as libcontainer does).
    pub(crate) files_without_property: Vec<String>,
}

fn props_as_map<S: serde::Serializer>(p: &[UnitProperty], s: S) -> Result<S::Ok, S::Error> {
    let m: BTreeMap<&str, String> = p
        .iter()
        .map(|p| {
            let v = if p.value == INFINITY {
                "infinity".to_string()
            } else {
                p.value.to_string()
            };
            (p.name, v)
        })
        .collect();
    m.serialize(s)
}

/// A planned value that no unit property can carry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: value {value:?} cannot be expressed as a systemd unit property")]
pub struct UnmappableValue {
    /// The interface file.
    pub(crate) file: String,
    /// The value planned for it.
    pub(crate) value: String,
}

/// The unit name of a systemd-driver cgroup path (its last component), when
/// it is a slice.
pub fn unit_of(cgroup: &str) -> Option<&str> {
    let last = cgroup.rsplit('/').next()?;
    (last.ends_with(".slice") && last.len() > ".slice".len()).then_some(last)
}

/// The parent slice of a slice unit by systemd's naming: `a-b-c.slice` →
/// `a-b.slice`, `a.slice` → `-.slice`.
pub fn parent_slice(unit: &str) -> String {
    let base = unit.strip_suffix(".slice").unwrap_or(unit);
    match base.rfind('-') {
        Some(i) => format!("{}.slice", &base[..i]),
        None => "-.slice".to_string(),
    }
}

fn parse_max(value: &str) -> Option<u64> {
    let v = value.trim();
    if v == "max" || v == "-1" {
        return Some(INFINITY);
    }
    v.parse::<u64>().ok()
}

/// `CPUQuotaPerSecUSec` for a quota of `quota_us` per `period_us`.
pub(crate) fn quota_per_sec_usec(quota_us: u64, period_us: u64) -> u64 {
    if period_us == 0 {
        return INFINITY;
    }
    ((quota_us as u128 * 1_000_000) / period_us as u128).min(u64::MAX as u128 - 1) as u64
}

/// The properties for one cgroup's planned writes (all for the same cgroup),
/// and the files no property expresses.
pub fn properties_for(
    writes: &[&CgroupWrite],
) -> Result<(Vec<UnitProperty>, Vec<String>), UnmappableValue> {
    let mut props: Vec<UnitProperty> = Vec::new();
    let mut other = Vec::new();
    let bad = |w: &CgroupWrite| UnmappableValue {
        file: w.file.display().to_string(),
        value: w.value.clone(),
    };
    let mut push = |name: &'static str, value: u64| {
        if let Some(p) = props.iter_mut().find(|p| p.name == name) {
            p.value = value;
        } else {
            props.push(UnitProperty { name, value });
        }
    };
    // v1 carries quota and period in two files.
    let v1_period = writes
        .iter()
        .find(|w| file_name(w) == "cpu.cfs_period_us")
        .and_then(|w| w.value.trim().parse::<u64>().ok())
        .unwrap_or(100_000);
    for w in writes {
        let name = file_name(w);
        match name {
            "cpu.weight" => push("CPUWeight", w.value.trim().parse().map_err(|_| bad(w))?),
            "cpu.shares" => push("CPUShares", w.value.trim().parse().map_err(|_| bad(w))?),
            "cpu.max" => {
                let mut it = w.value.split_whitespace();
                let quota = it.next().ok_or_else(|| bad(w))?;
                let period: u64 = match it.next() {
                    Some(p) => p.parse().map_err(|_| bad(w))?,
                    None => 100_000,
                };
                let per_sec = match quota {
                    "max" => INFINITY,
                    q => quota_per_sec_usec(q.parse().map_err(|_| bad(w))?, period),
                };
                push("CPUQuotaPerSecUSec", per_sec);
                push("CPUQuotaPeriodUSec", period);
            }
            "cpu.cfs_period_us" => push("CPUQuotaPeriodUSec", v1_period),
            "cpu.cfs_quota_us" => {
                let q: i64 = w.value.trim().parse().map_err(|_| bad(w))?;
                let per_sec = if q < 0 {
                    INFINITY
                } else {
                    quota_per_sec_usec(q as u64, v1_period)
                };
                push("CPUQuotaPerSecUSec", per_sec);
            }
            "memory.max" => push("MemoryMax", parse_max(&w.value).ok_or_else(|| bad(w))?),
            "memory.min" => push("MemoryMin", parse_max(&w.value).ok_or_else(|| bad(w))?),
            "memory.low" => push("MemoryLow", parse_max(&w.value).ok_or_else(|| bad(w))?),
            "memory.high" => push("MemoryHigh", parse_max(&w.value).ok_or_else(|| bad(w))?),
            "memory.limit_in_bytes" => {
                push("MemoryLimit", parse_max(&w.value).ok_or_else(|| bad(w))?)
            }
            "pids.max" => push("TasksMax", parse_max(&w.value).ok_or_else(|| bad(w))?),
            _ => other.push(w.file.display().to_string()),
        }
    }
    Ok((props, other))
}

fn file_name(w: &CgroupWrite) -> &str {
    w.file.file_name().and_then(|s| s.to_str()).unwrap_or("")
}

/// Group a plan's writes by cgroup (first appearance order: parents first)
/// into slice units. Writes whose cgroup is not a slice are skipped (not a
/// systemd-driver plan).
pub(crate) fn plan_units(writes: &[CgroupWrite]) -> Result<Vec<PlannedUnit>, UnmappableValue> {
    let mut order: Vec<&str> = Vec::new();
    let mut groups: BTreeMap<&str, Vec<&CgroupWrite>> = BTreeMap::new();
    for w in writes {
        if unit_of(&w.cgroup).is_none() {
            continue;
        }
        let g = groups.entry(w.cgroup.as_str()).or_default();
        if g.is_empty() {
            order.push(w.cgroup.as_str());
        }
        g.push(w);
    }
    let mut out = Vec::with_capacity(order.len());
    for cgroup in order {
        let ws = &groups[cgroup];
        let unit = unit_of(cgroup).unwrap_or_default().to_string();
        let (properties, files_without_property) = properties_for(ws)?;
        out.push(PlannedUnit {
            parent: parent_slice(&unit),
            unit,
            cgroup: cgroup.to_string(),
            level: ws[0].level,
            properties,
            files_without_property,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn w(cgroup: &str, file: &str, value: &str) -> CgroupWrite {
        let dir = PathBuf::from("/sys/fs/cgroup").join(cgroup);
        CgroupWrite {
            file: dir.join(file),
            value: value.to_string(),
            dir,
            cgroup: cgroup.to_string(),
            level: CgroupLevel::Pod,
        }
    }

    #[test]
    fn names_and_parents() {
        assert_eq!(
            unit_of("kubepods.slice/kubepods-burstable.slice"),
            Some("kubepods-burstable.slice")
        );
        assert_eq!(unit_of("kubepods/burstable"), None);
        assert_eq!(unit_of(".slice"), None);
        assert_eq!(parent_slice("kubepods.slice"), "-.slice");
        assert_eq!(parent_slice("kubepods-burstable.slice"), "kubepods.slice");
        assert_eq!(
            parent_slice("kubepods-burstable-pod1_2.slice"),
            "kubepods-burstable.slice"
        );
    }

    #[test]
    fn v2_files_to_properties() {
        let c = "kubepods.slice/kubepods-pod1.slice";
        let ws = [
            w(c, "cpu.weight", "79"),
            w(c, "cpu.max", "50000 100000"),
            w(c, "memory.max", "134217728"),
            w(c, "memory.min", "67108864"),
            w(c, "memory.high", "max"),
            w(c, "pids.max", "1024"),
            w(c, "io.weight", "10"),
        ];
        let refs: Vec<&CgroupWrite> = ws.iter().collect();
        let (p, other) = properties_for(&refs).unwrap();
        let r: Vec<String> = p.iter().map(UnitProperty::render).collect();
        assert_eq!(
            r,
            [
                "CPUWeight=79",
                "CPUQuotaPerSecUSec=500000",
                "CPUQuotaPeriodUSec=100000",
                "MemoryMax=134217728",
                "MemoryMin=67108864",
                "MemoryHigh=infinity",
                "TasksMax=1024",
            ]
        );
        assert_eq!(
            other,
            ["/sys/fs/cgroup/kubepods.slice/kubepods-pod1.slice/io.weight"]
        );
    }

    #[test]
    fn cpu_max_unlimited_and_custom_period() {
        let c = "kubepods.slice";
        let ws = [w(c, "cpu.max", "max 50000")];
        let (p, _) = properties_for(&ws.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(p[0].value, INFINITY);
        assert_eq!(p[1].render(), "CPUQuotaPeriodUSec=50000");
        // 250m at a 50 ms period: 12500 µs per 50 ms = 250000 µs per s
        let ws = [w(c, "cpu.max", "12500 50000")];
        let (p, _) = properties_for(&ws.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(p[0].render(), "CPUQuotaPerSecUSec=250000");
    }

    #[test]
    fn v1_files_to_properties() {
        let c = "kubepods.slice/kubepods-besteffort.slice";
        let ws = [
            w(c, "cpu.shares", "2"),
            w(c, "cpu.cfs_period_us", "100000"),
            w(c, "cpu.cfs_quota_us", "-1"),
            w(c, "memory.limit_in_bytes", "1048576"),
        ];
        let (p, _) = properties_for(&ws.iter().collect::<Vec<_>>()).unwrap();
        let r: Vec<String> = p.iter().map(UnitProperty::render).collect();
        assert_eq!(
            r,
            [
                "CPUShares=2",
                "CPUQuotaPeriodUSec=100000",
                "CPUQuotaPerSecUSec=infinity",
                "MemoryLimit=1048576"
            ]
        );
    }

    #[test]
    fn bad_value_is_an_error_with_file_and_value() {
        let ws = [w("kubepods.slice", "cpu.weight", "lots")];
        let e = properties_for(&ws.iter().collect::<Vec<_>>()).unwrap_err();
        assert!(e.to_string().contains("cpu.weight"), "{e}");
        assert_eq!(e.value, "lots");
    }

    #[test]
    fn plan_units_groups_in_order() {
        let ws = [
            w("kubepods.slice", "cpu.weight", "100"),
            w("kubepods.slice/kubepods-burstable.slice", "cpu.weight", "5"),
            w("kubepods.slice", "memory.max", "1000"),
            w("kubepods/burstable", "cpu.weight", "5"),
        ];
        let u = plan_units(&ws).unwrap();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].unit, "kubepods.slice");
        assert_eq!(u[0].properties.len(), 2);
        assert_eq!(u[1].parent, "kubepods.slice");
    }

    proptest::proptest! {
        /// The kubelet's quotas (millicpu·period/1000 µs) give whole
        /// milliseconds per second at any period, so systemd's 2-decimal
        /// percentage keeps them exactly, and cpu.max comes back the same.
        #[test]
        fn kubelet_quotas_survive_systemd(milli in 1i64..256_000, period in 1000u64..1_000_000) {
            let q = crate::policy::enforce::plan::milli_cpu_to_quota(milli, period) as u64;
            let per_sec = quota_per_sec_usec(q, period);
            if q * 1000 == milli as u64 * period {
                proptest::prop_assert_eq!(per_sec % 100, 0);
                proptest::prop_assert_eq!(per_sec * period / 1_000_000, q);
            }
        }
    }
}
