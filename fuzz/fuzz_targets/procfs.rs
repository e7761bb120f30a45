//! /proc files: meminfo, cpuinfo, mountinfo (cgroup detection): never a
//! panic on any content.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let _ = qosd::sys::procfs::parse_meminfo(s);
    let _ = qosd::sys::procfs::count_cpuinfo_processors(s);
    let _ = qosd::sys::detect::parse_mountinfo(s);
    let _ = qosd::sys::detect::layout_from_mountinfo(s, std::path::Path::new("/proc/self/mountinfo"));
});
