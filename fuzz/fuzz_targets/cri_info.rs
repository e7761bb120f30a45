//! The CRI verbose `info` JSON (containerd's sandbox and container
//! status): never a panic; reconstructed CPU limits are never negative.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let info: HashMap<String, String> = [("info".to_string(), s.to_string())].into();
    let _ = qosd::cri::inventory::cgroup_parent_from_info(&info);
    if let Some(r) = qosd::cri::inventory::resources_from_info(&info) {
        let c = qosd::cri::reconstruct::ContainerSettings::from_cri("c", &r);
        if let Some(m) = c.cpu_limit_millis() {
            assert!(m > 0, "cpu limit {m} from quota {:?} period {:?}", c.cpu_quota, c.cpu_period);
        }
        let _ = c.cpu_request_millis();
    }
});
