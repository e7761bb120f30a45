//! cgroup file contents: memory.stat fields, cpusets, cgroup parents (pod
//! uid and class from a path), uids: never a panic; a parsed parent's uid
//! is only trusted after validation.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::cgroup_files(data));
