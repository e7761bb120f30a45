//! cgroup file contents: memory.stat fields, cpusets, cgroup parents (pod
//! uid and class from a path), uids: never a panic; a parsed parent's uid
//! is only trusted after validation.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    for key in ["anon", "file", "inactive_file", "total_inactive_file"] {
        let _ = qosd::sys::signals::stat_field(s, key);
    }
    if let Ok(set) = qosd::policy::cpu::cpuset::CpuSet::parse(s) {
        let _ = set.to_string();
    }
    if let Some(p) = qosd::cri::reconstruct::parse_cgroup_parent(s) {
        let _ = qosd::core::uid::validate_uid(&p.uid);
    }
    let _ = qosd::core::uid::validate_uid(s);
});
