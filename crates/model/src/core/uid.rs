//! Pod UIDs: the one validator for every pod source (CRI sandboxes,
//! manifests). A UID becomes a cgroup directory name (`pod<uid>`), so
//! anything that could turn into a path is refused.

/// Longest accepted pod UID, in bytes (a UUID is 36, an MD5 hex hash 32).
pub(crate) const MAX_UID_LEN: usize = 64;

/// Reject a pod UID that is not a plain UID (UUID or hex hash): only ASCII
/// letters, digits and `-`, 1..=64 characters. Anything else (`/`, `..`,
/// NUL, whitespace, overlong) could turn into a path and is refused.
pub fn validate_uid(uid: &str) -> Result<(), String> {
    if uid.is_empty() {
        return Err("empty pod uid".to_string());
    }
    if uid.len() > MAX_UID_LEN {
        return Err(format!(
            "pod uid is {} bytes long (at most {MAX_UID_LEN} allowed)",
            uid.len()
        ));
    }
    if let Some(c) = uid
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Err(format!("pod uid {uid:?} contains {c:?}: not a plain UID"));
    }
    Ok(())
}
