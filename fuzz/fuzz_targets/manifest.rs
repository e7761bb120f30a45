//! Pod manifests (YAML, JSON, lists, multi-document): never a panic; every
//! accepted pod has a plain uid (it becomes a cgroup path).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../checks.rs"]
mod checks;

fuzz_target!(|data: &[u8]| checks::manifest(data));
