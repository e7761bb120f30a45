//! /proc files: meminfo, cpuinfo, mountinfo (cgroup detection): never a
//! panic on any content.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::procfs(data));
